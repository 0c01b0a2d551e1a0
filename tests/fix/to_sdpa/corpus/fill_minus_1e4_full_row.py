"""refused: fully masked

-1e4 over a fully masked row averages the values; SDPA's -inf does not."""

import math

import torch
import torch.nn as nn

B, H, T, S, D = 2, 2, 12, 12, 8

class Attend(nn.Module):
    def forward(self, q, k, v, pad):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        s = s.masked_fill(pad, -1e4)
        return torch.softmax(s, dim=-1) @ v


def make():
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    return Attend().eval(), (q, k, v, torch.arange(T).view(T, 1).expand(T, S) == 0)
