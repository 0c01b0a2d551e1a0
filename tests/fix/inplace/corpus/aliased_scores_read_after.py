"""refused: may be aliased
forced: output 1 differs
The scores aliased (`raw = att`) and read after the mask: in place, `raw` would hold the masked scores."""

import torch
import torch.nn as nn

SEQ, DIM = 8, 4


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1), persistent=False)

    def forward(self, q, k, v):
        t = q.size(-2)
        att = q @ k.transpose(-2, -1)
        raw = att
        att = att.masked_fill(self.mask[:t, :t], float("-inf"))
        return att.softmax(-1) @ v, raw.logsumexp(-1)


def make():
    torch.manual_seed(0)
    return Attention(), tuple(torch.randn(2, SEQ, DIM) for _ in range(3))
