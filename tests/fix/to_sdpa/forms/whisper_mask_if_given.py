"""rewritten: attn_mask=(mask[:n_ctx, :n_ctx] if mask is not None else None), scale=1.0

whisper's qkv_attention where only the output is used: `if mask is not None: qk = qk + mask[:n_ctx, :n_ctx]`
is one additive mask, None when none is given; q and k are scaled before the product (scale=1.0)."""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class MultiHeadAttention(nn.Module):
    def __init__(self, n_state=16, n_head=2):
        super().__init__()
        self.n_head = n_head
        self.query, self.key, self.value = nn.Linear(n_state, n_state), nn.Linear(n_state, n_state, bias=False), \
            nn.Linear(n_state, n_state)

    def forward(self, x: Tensor, mask: Optional[Tensor] = None):
        q, k, v = self.query(x), self.key(x), self.value(x)
        n_batch, n_ctx, n_state = q.shape
        scale = (n_state // self.n_head) ** -0.25
        q = q.view(*q.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)
        k = k.view(*k.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)
        v = v.view(*v.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)

        qk = (q * scale) @ (k * scale).transpose(-1, -2)
        if mask is not None:
            qk = qk + mask[:n_ctx, :n_ctx]

        w = F.softmax(qk, dim=-1).to(q.dtype)
        return (w @ v).permute(0, 2, 1, 3).flatten(start_dim=2)


def make():
    torch.manual_seed(0)
    mask = torch.empty(8, 8).fill_(-float("inf")).triu_(1)
    return MultiHeadAttention().eval(), (torch.randn(2, 6, 16), mask)

# ruff: noqa: E501, UP045, B010 - written the way the project writes it
