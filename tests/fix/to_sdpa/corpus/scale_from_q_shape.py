"""rewritten: no scale=

scale = q.shape[-1] ** -0.5: SDPA's default."""


import torch
import torch.nn as nn
import torch.nn.functional as F

B, H, T, S, D = 2, 2, 12, 12, 8

class Attend(nn.Module):
    def forward(self, q, k, v):
        scale = q.shape[-1] ** -0.5
        s = torch.matmul(q, k.transpose(-2, -1)) * scale
        return torch.matmul(F.softmax(s, dim=-1), v)


def make():
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    return Attend().eval(), (q, k, v)
