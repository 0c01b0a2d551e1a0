"""refused: scaled on line

issue 21: a float bias added before the scale must not become attn_mask=bias."""

import math

import torch
import torch.nn as nn

B, H, T, S, D = 2, 2, 12, 12, 8

class Attend(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(1, H, T, S))

    def forward(self, q, k, v):
        s = (q @ k.transpose(-2, -1) + self.bias) / math.sqrt(D)
        return torch.softmax(s, dim=-1) @ v


def make():
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    return Attend().eval(), (q, k, v)
