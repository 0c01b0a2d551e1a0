"""rewritten

softmax(dim=2) on 3-D scores is the last dim."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

B, H, T, S, D = 2, 2, 12, 12, 8

class Attend(nn.Module):
    def forward(self, q, k, v):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        return F.softmax(s, dim=2) @ v


def make():
    torch.manual_seed(0)
    return Attend().eval(), (torch.randn(4, T, D), torch.randn(4, S, D), torch.randn(4, S, D))
