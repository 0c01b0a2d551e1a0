"""refused: more than one dtype

issue 21: softmax(dtype=float64) then @ v.double(): q, k, v of different dtypes."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

B, H, T, S, D = 2, 2, 12, 12, 8

class Attend(nn.Module):
    def forward(self, q, k, v):
        s = q @ k.transpose(-2, -1) / math.sqrt(D)
        p = F.softmax(s, dim=-1, dtype=torch.float64)
        return p @ v.double()


def make():
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    return Attend().eval(), (q, k, v)
