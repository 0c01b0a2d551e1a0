"""rewritten: dropout_p=self.drop.p if self.drop.training else 0.0

dropout in training mode: dropout_p follows the flag; compared in eval mode."""

import math

import torch
import torch.nn as nn

B, H, T, S, D = 2, 2, 12, 12, 8

class Attend(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.2)

    def forward(self, q, k, v):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        return self.drop(torch.softmax(s, dim=-1)) @ v


def make():
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    return Attend().train(), (q, k, v)
