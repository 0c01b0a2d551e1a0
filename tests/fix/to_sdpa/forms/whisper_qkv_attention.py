"""refused: the attention scores `qk`

whisper's MultiHeadAttention.qkv_attention as written: `if mask is not None: qk = qk + mask[:n_ctx, :n_ctx]`,
then `qk = qk.detach()` and `return out, qk`: the scores go back to the caller (alignment heads read
them), which no SDPA call gives."""

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
        self.out = nn.Linear(n_state, n_state)

    def forward(self, x: Tensor, mask: Optional[Tensor] = None):
        wv, qk = self.qkv_attention(self.query(x), self.key(x), self.value(x), mask)
        return self.out(wv), qk

    def qkv_attention(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor] = None):
        n_batch, n_ctx, n_state = q.shape
        scale = (n_state // self.n_head) ** -0.25
        q = q.view(*q.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)
        k = k.view(*k.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)
        v = v.view(*v.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)

        qk = (q * scale) @ (k * scale).transpose(-1, -2)
        if mask is not None:
            qk = qk + mask[:n_ctx, :n_ctx]
        qk = qk.float()

        w = F.softmax(qk, dim=-1).to(q.dtype)
        out = (w @ v).permute(0, 2, 1, 3).flatten(start_dim=2)
        qk = qk.detach()
        return out, qk


def make():
    torch.manual_seed(0)
    mask = torch.empty(8, 8).fill_(-float("inf")).triu_(1)
    return MultiHeadAttention().eval(), (torch.randn(2, 6, 16), mask)

# ruff: noqa: E501, UP045, B010 - written the way the project writes it
