"""rewritten: scale=

q made by a permute and a transpose of negative dims: not followed, so the scale stays explicit (still right)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

B, H, T, S, D = 2, 2, 12, 12, 8

class Attend(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = D

    def forward(self, x, k, v):
        b, t, _ = x.shape
        q = x.view(b, t, H, self.head_dim).permute(0, 2, 3, 1).transpose(-2, -1)
        s = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        return F.softmax(s, dim=-1) @ v


def make():
    torch.manual_seed(0)
    return Attend().eval(), (torch.randn(B, T, H * D), torch.randn(B, H, S, D), torch.randn(B, H, S, D))
