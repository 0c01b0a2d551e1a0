"""refused: may be `nn.Identity()`

Hostile: `self.drop = nn.Dropout(p) if p > 0 else nn.Identity()`: an Identity has no `.p`, so
`dropout_p=self.drop.p ...` would raise in train mode."""

import math

import torch
import torch.nn as nn


class Attend(nn.Module):
    def __init__(self, p=0.1):
        super().__init__()
        self.drop = nn.Dropout(p) if p > 0 else nn.Identity()

    def forward(self, q, k, v):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        return self.drop(torch.softmax(s, dim=-1)) @ v


def make():
    torch.manual_seed(0)
    return Attend().eval(), tuple(torch.randn(2, 2, 6, 8) for _ in range(3))
