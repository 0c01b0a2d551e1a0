"""refused: which may be a tensor

issue 21: a per-head Parameter is not a scale= number."""


import torch
import torch.nn as nn
import torch.nn.functional as F

B, H, T, S, D = 2, 2, 12, 12, 8

class Attend(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.full((1, H, 1, 1), D ** -0.5))

    def forward(self, q, k, v):
        s = q @ k.transpose(-2, -1) * self.scale
        return F.softmax(s, dim=-1) @ v


def make():
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    return Attend().eval(), (q, k, v)
