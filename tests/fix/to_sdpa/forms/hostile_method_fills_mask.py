"""rewritten: attn_mask=self.bias[:, :, :T, :T] != 0

Hostile: a `set_bidirectional()` method does `self.bias.fill_(1)`; the factory calls it. Not provably
causal: attn_mask= as written."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def __init__(self, n_embd=16, n_head=2, block_size=8):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.n_head, self.n_embd = n_head, n_embd
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def set_bidirectional(self):
        self.bias.fill_(1)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = (t.view(B, T, self.n_head, -1).transpose(1, 2) for t in self.c_attn(x).split(self.n_embd, dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        return (att @ v).transpose(1, 2).reshape(B, T, C)


def make():
    torch.manual_seed(0)
    m = SelfAttention()
    m.set_bidirectional()
    return m.eval(), (torch.randn(2, 6, 16),)
