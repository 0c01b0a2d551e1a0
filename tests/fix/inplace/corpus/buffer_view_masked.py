"""refused: may be a view or alias
forced: bias after the call differs
A relative bias kept in a buffer, sliced (a view of it) and masked: in place, the fill writes -inf into
the buffer itself, and the outputs of this one call do not show it."""

import torch
import torch.nn as nn

SEQ, DIM = 8, 4


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.randn(SEQ, SEQ))
        self.register_buffer("causal", torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1), persistent=False)

    def forward(self, q, k, v):
        t = q.size(-2)
        b = self.bias[:t, :t]
        b = b.masked_fill(self.causal[:t, :t], float("-inf"))
        return (q @ k.transpose(-2, -1) + b).softmax(-1) @ v


def make():
    torch.manual_seed(0)
    return Attention(), tuple(torch.randn(2, SEQ, DIM) for _ in range(3))
