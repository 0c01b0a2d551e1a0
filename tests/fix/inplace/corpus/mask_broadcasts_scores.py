"""refused: the mask broadcasts
forced: the rewritten forward raises on the calls seen
One score per key (`[B, 1, S]`) masked by a `[B, T, S]` mask: out of place the result grows to the mask's
shape; in place it cannot, and the rewritten forward would raise."""

import torch
import torch.nn as nn

SEQ, DIM = 8, 4


class KeyGate(nn.Module):
    def forward(self, q, k, v):
        gate = (q.mean(-2, keepdim=True) @ k.transpose(-2, -1)) * DIM ** -0.5
        causal = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).triu(1).expand(q.size(0), -1, -1)
        gate = gate.masked_fill(causal, float("-inf"))
        return gate.softmax(-1) @ v


def make():
    torch.manual_seed(0)
    return KeyGate(), tuple(torch.randn(2, SEQ, DIM) for _ in range(3))
