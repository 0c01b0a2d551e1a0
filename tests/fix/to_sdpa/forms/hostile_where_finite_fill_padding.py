"""refused: is finite

Hostile: `torch.where(keep, s, -1e9)` with a key padding mask passed in: a fully padded sample masks
whole rows, where the original averages the values and SDPA's boolean mask gives 0."""

import math

import torch
import torch.nn as nn


class Attend(nn.Module):
    def forward(self, q, k, v, keep):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        s = torch.where(keep[:, None, None, :], s, -1e9)
        return torch.softmax(s, dim=-1) @ v


def make():
    torch.manual_seed(0)
    keep = torch.ones(2, 6, dtype=torch.bool)
    keep[1, 3:] = False
    return Attend().eval(), (*(torch.randn(2, 2, 6, 8) for _ in range(3)), keep)
