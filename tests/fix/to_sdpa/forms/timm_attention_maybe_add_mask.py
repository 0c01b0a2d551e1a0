"""rewritten: F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=self.attn_drop.p if self.attn_drop.training else 0.0, scale=1.0)

timm's Attention, non-fused path: `q = q * self.scale`, `attn = maybe_add_mask(attn, attn_mask)` with the
helper defined in the file, `attn.softmax(dim=-1)`, `self.attn_drop`; a float mask is passed."""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn


def maybe_add_mask(scores: torch.Tensor, attn_mask: Optional[torch.Tensor] = None):
    return scores if attn_mask is None else scores + attn_mask


class Attention(nn.Module):
    def __init__(self, dim=16, num_heads=2, attn_drop=0.1):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.fused_attn = False
        self.qkv = nn.Linear(dim, dim * 3)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)

        if self.fused_attn:
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        else:
            q = q * self.scale
            attn = q @ k.transpose(-2, -1)
            attn = maybe_add_mask(attn, attn_mask)
            attn = attn.softmax(dim=-1)
            attn = self.attn_drop(attn)
            x = attn @ v

        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


def make():
    torch.manual_seed(0)
    return Attention().eval(), (torch.randn(2, 6, 16), torch.randn(2, 1, 6, 6))

# ruff: noqa: E501, UP045, B010 - written the way the project writes it
