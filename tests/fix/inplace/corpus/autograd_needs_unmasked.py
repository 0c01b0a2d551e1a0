"""refused: modified by an inplace operation
A z-loss of the unmasked scores, `(s * s).mean()`, returned beside the output: the source proof passes
(`s` is made here and rebound) and the forward seen ran without grads, but backward needs `s` as it was
before the mask; only the check with grads on sees it."""

import torch
import torch.nn as nn

SEQ, DIM = 8, 4


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1), persistent=False)

    def forward(self, q, k, v):
        t = q.size(-2)
        s = q @ k.transpose(-2, -1)
        z_loss = (s * s).mean()
        s = s.masked_fill(self.mask[:t, :t], float("-inf"))
        return s.softmax(-1) @ v, z_loss


def make():
    torch.manual_seed(0)
    return Attention(), tuple(torch.randn(2, SEQ, DIM) for _ in range(3))
