"""rewritten: scaled_dot_product_attention(q, k, v)

segment-anything's mask-decoder Attention: `_, _, _, c_per_head = q.shape`, `q @ k.permute(0, 1, 3, 2)`,
`attn / math.sqrt(c_per_head)` (SDPA's default scale), `torch.softmax(attn, dim=-1)`."""

import math

import torch
from torch import Tensor, nn


class Attention(nn.Module):
    def __init__(self, embedding_dim=16, num_heads=2):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = nn.Linear(embedding_dim, embedding_dim)
        self.k_proj = nn.Linear(embedding_dim, embedding_dim)
        self.v_proj = nn.Linear(embedding_dim, embedding_dim)
        self.out_proj = nn.Linear(embedding_dim, embedding_dim)

    def _separate_heads(self, x: Tensor, num_heads: int) -> Tensor:
        b, n, c = x.shape
        x = x.reshape(b, n, num_heads, c // num_heads)
        return x.transpose(1, 2)  # B x N_heads x N_tokens x C_per_head

    def _recombine_heads(self, x: Tensor) -> Tensor:
        b, n_heads, n_tokens, c_per_head = x.shape
        x = x.transpose(1, 2)
        return x.reshape(b, n_tokens, n_heads * c_per_head)  # B x N_tokens x C

    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        q = self._separate_heads(self.q_proj(q), self.num_heads)
        k = self._separate_heads(self.k_proj(k), self.num_heads)
        v = self._separate_heads(self.v_proj(v), self.num_heads)

        # Attention
        _, _, _, c_per_head = q.shape
        attn = q @ k.permute(0, 1, 3, 2)  # B x N_heads x N_tokens x N_tokens
        attn = attn / math.sqrt(c_per_head)
        attn = torch.softmax(attn, dim=-1)

        # Get output
        out = attn @ v
        out = self._recombine_heads(out)
        return self.out_proj(out)


def make():
    torch.manual_seed(0)
    return Attention().eval(), (torch.randn(2, 5, 16), torch.randn(2, 7, 16), torch.randn(2, 7, 16))
