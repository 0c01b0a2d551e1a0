"""refused: scaled on line

the bias added on one line, the scale on the next."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

B, H, T, S, D = 2, 2, 12, 12, 8

class Attend(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(1, H, T, S))

    def forward(self, q, k, v):
        s = q @ k.transpose(-2, -1) + self.bias
        s = s / math.sqrt(q.size(-1))
        return F.softmax(s, dim=-1) @ v


def make():
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    return Attend().eval(), (q, k, v)
