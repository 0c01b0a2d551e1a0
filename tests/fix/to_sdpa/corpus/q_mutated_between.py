"""refused: checked against the original

q changed in place between the scores and @ v: the call would read the new q."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

B, H, T, S, D = 2, 2, 12, 12, 8

class Attend(nn.Module):
    def forward(self, q, k, v):
        q = q.clone()
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        q.mul_(0.5)
        return F.softmax(s, dim=-1) @ v + q.sum()


def make():
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    return Attend().eval(), (q, k, v)
