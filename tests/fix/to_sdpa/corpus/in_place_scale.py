"""refused: not by one plain assignment

s /= scale: an augmented assignment."""

import math

import torch
import torch.nn as nn

B, H, T, S, D = 2, 2, 12, 12, 8

class Attend(nn.Module):
    def forward(self, q, k, v):
        s = q @ k.transpose(-2, -1)
        s /= math.sqrt(q.size(-1))
        return torch.softmax(s, dim=-1) @ v


def make():
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    return Attend().eval(), (q, k, v)
