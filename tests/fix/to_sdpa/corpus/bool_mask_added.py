"""refused: not a float tensor

issue 21: scores + bool_mask is valid torch (it adds 1): a refusal, not an internal error."""

import math

import torch
import torch.nn as nn

B, H, T, S, D = 2, 2, 12, 12, 8

class Attend(nn.Module):
    def forward(self, q, k, v, keep):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        s = s + keep
        return torch.softmax(s, dim=-1) @ v


def make():
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    return Attend().eval(), (q, k, v, torch.rand(T, S) > 0.5)
