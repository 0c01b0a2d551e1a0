"""refused: the same shapes with other values
A helper named like torch.ones hands out one cached tensor per length: the source proof takes it for a
new tensor and at run time it is no view, but in place each call's fill stays in it for the next call
(two calls with one mask agree; another mask of the same shape does not)."""

import functools

import torch
import torch.nn as nn

SEQ, DIM = 8, 4


@functools.cache
def ones(n: int) -> torch.Tensor:
    return torch.ones(n, n)


class GatedAttention(nn.Module):
    def forward(self, q, k, v, keep):
        w = ones(q.size(-2))
        w = w.masked_fill(~keep, 0.0)
        return ((q @ k.transpose(-2, -1)) * w).softmax(-1) @ v


def make():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, SEQ, DIM) for _ in range(3))
    return GatedAttention(), (q, k, v, torch.rand(SEQ, SEQ) > 0.3)
