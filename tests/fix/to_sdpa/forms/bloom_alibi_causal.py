"""rewritten: attn_mask=alibi.to(q.dtype).masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))

BLOOM-style ALiBi plus a causal mask (transformers' eager BLOOM before it returned its weights): a per-head
linear bias added to the scaled scores, then the causal buffer filled with the dtype's minimum. Two steps,
one float mask for SDPA: the bias with -inf where masked (the causal tril keeps a key in every row, so the
finite fill is exact)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def alibi_slopes(heads: int) -> torch.Tensor:
    start = 2 ** (-(2 ** -(math.log2(heads) - 3)))
    return torch.tensor([start ** (i + 1) for i in range(heads)])


class BloomAttention(nn.Module):
    def __init__(self, hidden=16, heads=2, max_len=8):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.inv_norm_factor = 1.0 / math.sqrt(self.head_dim)
        self.query_key_value = nn.Linear(hidden, 3 * hidden)
        self.register_buffer("slopes", alibi_slopes(heads))
        self.register_buffer("bias", torch.tril(torch.ones(max_len, max_len)).view(1, 1, max_len, max_len))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.query_key_value(x).view(B, T, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        alibi = self.slopes.view(1, self.heads, 1, 1) * torch.arange(T, device=x.device).view(1, 1, 1, T)
        scores = (q @ k.transpose(-1, -2)) * self.inv_norm_factor + alibi.to(q.dtype)
        scores = scores.masked_fill(self.bias[:, :, :T, :T] == 0, torch.finfo(scores.dtype).min)
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        return (probs @ v).transpose(1, 2).reshape(B, T, C)


def make():
    torch.manual_seed(0)
    return BloomAttention().eval(), (torch.randn(2, 6, 16),)
