"""Attention written by hand: matmul, scale, masked_fill, softmax, matmul.

It takes every problem the way hand-written code does: grouped K/V heads are copied out to the query
heads with repeat_interleave (what `enable_gqa` avoids), and the mask is a boolean [Sq, Sk] tensor built
once, outside the forward. A training step runs it under autograd as it stands.
"""

from __future__ import annotations

from attnprof.problem import Problem, allowed
from attnprof.variants.base import BuildOptions, Forward, Variant


def _masked(problem: Problem, device: str):
    """True where scores are masked ([Sq, Sk], built once); None without a mask."""
    return None if problem.mask.kind == "none" else ~allowed(problem, device)


def _expand(t, groups: int):
    """K or V copied out to one head per query head: [B, Hkv, S, D] -> [B, Hq, S, D]."""
    return t if groups == 1 else t.repeat_interleave(groups, dim=1)


def build_naive(problem: Problem, device: str, options: BuildOptions) -> Forward:
    import torch

    masked, groups = _masked(problem, device), problem.groups
    scale = problem.head_dim**-0.5

    def naive(q, k, v):
        k, v = _expand(k, groups), _expand(v, groups)
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # [B, H, Sq, Sk]
        if masked is not None:
            scores = scores.masked_fill(masked, float("-inf"))  # out of place: copies the scores
        return torch.matmul(torch.softmax(scores, dim=-1), v)  # [B, H, Sq, D]

    return naive


def build_inplace(problem: Problem, device: str, options: BuildOptions) -> Forward:
    import torch

    masked, groups = _masked(problem, device), problem.groups
    scale = problem.head_dim**-0.5

    def inplace(q, k, v):
        k, v = _expand(k, groups), _expand(v, groups)
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # [B, H, Sq, Sk]
        if masked is not None:
            # in place on the product, which autograd does not keep: safe in a training step too
            scores.masked_fill_(masked, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), v)  # [B, H, Sq, D]

    return inplace


VARIANTS = [
    Variant("naive", "naive", "hand-written, out-of-place masked_fill", build_naive),
    Variant("inplace", "naive", "hand-written, in-place masked_fill_", build_inplace),
]
