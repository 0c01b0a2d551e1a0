"""rewritten: attn_mask=self.mask[:T, :T]

Hostile: `setattr(self, "mask", ...)` in a method rebinds the causal mask to an all-True one."""

import math

import torch
import torch.nn as nn


class Attend(nn.Module):
    def __init__(self, n=8):
        super().__init__()
        self.register_buffer("mask", torch.ones(n, n, dtype=torch.bool).tril())

    def unmask(self):
        setattr(self, "mask", torch.ones_like(self.mask))

    def forward(self, q, k, v):
        T = q.size(-2)
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        s = s.masked_fill(~self.mask[:T, :T], float("-inf"))
        return torch.softmax(s, dim=-1) @ v


def make():
    torch.manual_seed(0)
    m = Attend()
    m.unmask()
    return m.eval(), tuple(torch.randn(2, 2, 6, 8) for _ in range(3))

# ruff: noqa: E501, UP045, B010 - written the way the project writes it
