"""refused: also read on line

masked_fill_ in place on the scores: a statement the chain does not own."""

import math

import torch
import torch.nn as nn

B, H, T, S, D = 2, 2, 12, 12, 8

class Attend(nn.Module):
    def forward(self, q, k, v, m):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        s.masked_fill_(m, float("-inf"))
        return torch.softmax(s, dim=-1) @ v


def make():
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    return Attend().eval(), (q, k, v, torch.rand(T, S) > 0.7)
