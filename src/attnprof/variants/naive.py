"""Attention written by hand: matmul, scale, masked_fill, softmax, matmul."""

from __future__ import annotations

from attnprof.problem import Problem
from attnprof.variants.base import BuildOptions, Forward, Variant


def _causal_mask(problem: Problem, device: str):
    import torch

    # built once, outside the forward: True above the diagonal, where scores are masked
    return torch.ones(problem.seq, problem.seq, dtype=torch.bool, device=device).triu(1)  # [S, S]


def build_naive(problem: Problem, device: str, options: BuildOptions) -> Forward:
    import torch

    mask = _causal_mask(problem, device)
    scale = problem.head_dim**-0.5

    def naive(q, k, v):
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # [B, H, S, S]
        scores = scores.masked_fill(mask, float("-inf"))  # out of place: copies the scores
        return torch.matmul(torch.softmax(scores, dim=-1), v)  # [B, H, S, D]

    return naive


def build_inplace(problem: Problem, device: str, options: BuildOptions) -> Forward:
    import torch

    mask = _causal_mask(problem, device)
    scale = problem.head_dim**-0.5

    def inplace(q, k, v):
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # [B, H, S, S]
        scores.masked_fill_(mask, float("-inf"))  # in place: safe because autograd is off
        return torch.matmul(torch.softmax(scores, dim=-1), v)  # [B, H, S, D]

    return inplace


VARIANTS = [
    Variant("naive", "naive", "hand-written, out-of-place masked_fill", build_naive),
    Variant("inplace", "naive", "hand-written, in-place masked_fill_", build_inplace),
]
