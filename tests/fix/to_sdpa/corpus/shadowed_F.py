"""rewritten: nn.functional.scaled_dot_product_attention

issue 21: a local F = 3 shadows torch.nn.functional: the call goes through nn.functional, which nothing rebinds."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401 - the name a local shadows

B, H, T, S, D = 2, 2, 12, 12, 8

class Attend(nn.Module):
    def forward(self, q, k, v):
        F = 3  # noqa: F811
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        return torch.softmax(s, dim=-1) @ v * F


def make():
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    return Attend().eval(), (q, k, v)
