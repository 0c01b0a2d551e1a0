"""refused: is finite

llm-foundry's MPT scaled_multihead_dot_product_attention, padding part: `masked_fill(~key_padding_mask,
torch.finfo(q.dtype).min)`. A fully padded sample makes a fully masked row, where the original averages
the values and no SDPA mask does."""

import math

import torch
import torch.nn as nn


class MPTAttention(nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.Wqkv = nn.Linear(d, 3 * d)

    def forward(self, x, key_padding_mask):
        b, s_k, _ = x.shape
        q, k, v = self.Wqkv(x).view(b, s_k, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        softmax_scale = 1 / math.sqrt(q.size(-1))
        attn_weight = q.matmul(k.transpose(-2, -1)) * softmax_scale
        min_val = torch.finfo(q.dtype).min
        attn_weight = attn_weight.masked_fill(~key_padding_mask.view((b, 1, 1, s_k)), min_val)
        attn_weight = torch.softmax(attn_weight, dim=-1)
        return attn_weight.matmul(v).transpose(1, 2).reshape(b, s_k, -1)


def make():
    torch.manual_seed(0)
    keep = torch.ones(2, 6, dtype=torch.bool)
    keep[1, 4:] = False
    return MPTAttention().eval(), (torch.randn(2, 6, 16), keep)
