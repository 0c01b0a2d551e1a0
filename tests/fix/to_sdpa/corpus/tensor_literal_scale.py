"""refused: may be a tensor

division by torch.tensor(8.0) written inline."""


import torch
import torch.nn as nn
import torch.nn.functional as F

B, H, T, S, D = 2, 2, 12, 12, 8

class Attend(nn.Module):
    def forward(self, q, k, v):
        s = q @ k.transpose(-2, -1) / torch.tensor(8.0)
        return F.softmax(s, dim=-1) @ v


def make():
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    return Attend().eval(), (q, k, v)
