"""rewritten: attn_mask=key_padding_mask[:, None, None, :]

A decoder's cross-attention over an encoder's padded output (key padding mask, -inf fill): never causal.
A fully padded sample gives NaN in the original and 0 after; the plan says so."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CrossAttention(nn.Module):
    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_kv = nn.Linear(dim, 2 * dim, bias=False)

    def forward(self, x, context, key_padding_mask):
        b, n, d = x.shape
        q = self.to_q(x).view(b, n, self.heads, -1).transpose(1, 2)
        k, v = (t.view(b, context.shape[1], self.heads, -1).transpose(1, 2) for t in self.to_kv(context).chunk(2, -1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        scores = scores.masked_fill(~key_padding_mask[:, None, None, :], float("-inf"))
        out = F.softmax(scores, dim=-1) @ v
        return out.transpose(1, 2).reshape(b, n, d)


def make():
    torch.manual_seed(0)
    keep = torch.ones(2, 7, dtype=torch.bool)
    keep[1, 5:] = False
    return CrossAttention().eval(), (torch.randn(2, 5, 16), torch.randn(2, 7, 16), keep)
