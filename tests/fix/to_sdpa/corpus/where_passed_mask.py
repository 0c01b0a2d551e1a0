"""rewritten: attn_mask=keep

torch.where(keep, s, -inf) with a mask passed in: attn_mask=keep."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

B, H, T, S, D = 2, 2, 12, 12, 8

class Attend(nn.Module):
    def forward(self, q, k, v, keep):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        s = torch.where(keep, s, float("-inf"))
        return F.softmax(s, dim=-1) @ v


def make():
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    return Attend().eval(), (q, k, v, torch.ones(T, S, dtype=torch.bool).tril())
