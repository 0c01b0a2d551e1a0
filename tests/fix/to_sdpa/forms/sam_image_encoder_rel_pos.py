"""refused: the helper `add_decomposed_rel_pos(...)`

segment-anything's image-encoder Attention with `use_rel_pos`: the scores go through
`add_decomposed_rel_pos(attn, q, ...)`, a helper that builds a bias from q itself."""

import torch
import torch.nn as nn


def add_decomposed_rel_pos(attn, q, rel_h, rel_w):
    B, N, C = q.shape
    bias = (q @ rel_h.t()) + (q @ rel_w.t())
    return attn + bias


class Attention(nn.Module):
    def __init__(self, dim=16, num_heads=2, tokens=6):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.use_rel_pos = True
        self.rel_pos_h = nn.Parameter(torch.randn(tokens, dim // num_heads) * 0.1)
        self.rel_pos_w = nn.Parameter(torch.randn(tokens, dim // num_heads) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, _ = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.reshape(3, B * self.num_heads, N, -1).unbind(0)

        attn = (q * self.scale) @ k.transpose(-2, -1)

        if self.use_rel_pos:
            attn = add_decomposed_rel_pos(attn, q, self.rel_pos_h, self.rel_pos_w)

        attn = attn.softmax(dim=-1)
        x = (attn @ v).view(B, self.num_heads, N, -1).permute(0, 2, 1, 3).reshape(B, N, -1)
        return self.proj(x)


def make():
    torch.manual_seed(0)
    return Attention().eval(), (torch.randn(2, 6, 16),)
