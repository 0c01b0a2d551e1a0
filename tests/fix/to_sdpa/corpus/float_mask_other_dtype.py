"""refused: checked against the original

a float16 bias added to float32 scores (torch promotes it): SDPA takes no mask of another float dtype."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

B, H, T, S, D = 2, 2, 12, 12, 8

class Attend(nn.Module):
    def forward(self, q, k, v, bias):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        return F.softmax(s + bias, dim=-1) @ v


def make():
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    return Attend().eval(), (q, k, v, torch.randn(T, S, dtype=torch.float16))
