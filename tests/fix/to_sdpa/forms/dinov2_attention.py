"""rewritten: scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop.p if self.attn_drop.training else 0.0, scale=1.0)

DINOv2's Attention: `q, k, v = qkv[0] * self.scale, qkv[1], qkv[2]`, unmasked (a ViT encoder: never
causal), `attn.softmax(dim=-1)`, `self.attn_drop`."""

import torch
from torch import Tensor, nn


class Attention(nn.Module):
    def __init__(self, dim=16, num_heads=2, attn_drop=0.0):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = head_dim**-0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)

        q, k, v = qkv[0] * self.scale, qkv[1], qkv[2]
        attn = q @ k.transpose(-2, -1)

        attn = attn.softmax(dim=-1)
        attn = self.attn_drop(attn)

        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


def make():
    torch.manual_seed(0)
    return Attention().eval(), (torch.randn(2, 6, 16),)

# ruff: noqa: E501, UP045, B010 - written the way the project writes it
