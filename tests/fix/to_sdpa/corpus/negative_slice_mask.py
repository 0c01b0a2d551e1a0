"""rewritten: attn_mask=

a tril buffer sliced from the end ([-t:, :s]) is not top-left: it goes to attn_mask as written."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

B, H, T, S, D = 2, 2, 12, 12, 8

class Attend(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("causal", torch.tril(torch.ones(S, S, dtype=torch.bool)))

    def forward(self, q, k, v):
        t, s = q.size(-2), k.size(-2)
        w = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        w = w.masked_fill(~self.causal[-t:, :s], float("-inf"))
        return F.softmax(w, dim=-1) @ v


def make():
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    return Attend().eval(), (q, k, v)
