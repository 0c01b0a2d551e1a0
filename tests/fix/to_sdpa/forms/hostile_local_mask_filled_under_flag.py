"""rewritten: attn_mask=mask

Hostile: the mask is a fresh tril, then `mask.fill_(True)` under a flag: not provably causal."""

import math

import torch
import torch.nn as nn


class Attend(nn.Module):
    def __init__(self, bidirectional=True):
        super().__init__()
        self.bidirectional = bidirectional

    def forward(self, q, k, v):
        T = q.size(-2)
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        if self.bidirectional:
            mask.fill_(True)
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        s = s.masked_fill(~mask, float("-inf"))
        return torch.softmax(s, dim=-1) @ v


def make():
    torch.manual_seed(0)
    return Attend().eval(), tuple(torch.randn(2, 2, 6, 8) for _ in range(3))
