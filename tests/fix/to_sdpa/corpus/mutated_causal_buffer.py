"""rewritten: attn_mask=self.bias[:, :, :t, :t] != 0

a tril buffer changed after it was made (item assignment in __init__): not provably causal, so the buffer
goes to attn_mask= as written, which is right whatever it holds."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

B, H, T, S, D = 2, 2, 12, 12, 8

class Attend(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(32, 32)).view(1, 1, 32, 32))
        self.bias[..., 5, 2] = 0

    def forward(self, q, k, v):
        t = q.size(-2)
        w = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        w = w.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        return F.softmax(w, dim=-1) @ v


def make():
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    return Attend().eval(), (q, k, v)
