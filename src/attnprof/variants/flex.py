"""flex_attention under torch.compile with a block mask built once.

The mask is a mask_mod (causal, sliding window, documents; decode queries offset to the cache's end),
from which create_block_mask records the blocks that are fully masked, so the kernel skips them. With
--dense-mask the mask_mod reads the materialized boolean tensor instead: what users write when they
have one; the block mask still skips the blocks it empties. GQA: enable_gqa=True.
"""

from __future__ import annotations

from attnprof.problem import Problem, allowed
from attnprof.variants.base import BuildOptions, Forward, Variant


def mask_mod(problem: Problem, device: str):
    """The problem's mask as a flex mask_mod (True: attend); None for no mask."""
    kind, size = problem.mask.kind, problem.mask.size
    off = problem.offset
    if kind == "none":
        return None
    if problem.dense_mask:
        dense = allowed(problem, device)  # [Sq, Sk]
        return lambda b, h, q_idx, kv_idx: dense[q_idx, kv_idx]
    if kind == "window":
        return lambda b, h, q_idx, kv_idx: (q_idx + off >= kv_idx) & (q_idx + off - kv_idx < size)
    if kind == "document":
        return lambda b, h, q_idx, kv_idx: (q_idx + off >= kv_idx) & ((q_idx + off) // size == kv_idx // size)
    return lambda b, h, q_idx, kv_idx: q_idx + off >= kv_idx


def build_flex(problem: Problem, device: str, options: BuildOptions) -> Forward:
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    mod = mask_mod(problem, device)
    # the block mask is built once, outside the forward, as the flex docs advise
    block_mask = None if mod is None else create_block_mask(mod, None, None, problem.q_len, problem.seq,
                                                            device=device)
    compiled = torch.compile(flex_attention)
    gqa = problem.groups > 1

    def flex(q, k, v):  # [B, H, S, D]
        return compiled(q, k, v, block_mask=block_mask, enable_gqa=gqa)

    return flex


def supports_flex(problem: Problem, device: str) -> str | None:
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError as e:
        return f"flex_attention is not in this torch ({e})"
    if device == "cpu":
        return _why_not_on_cpu()
    return None


def _why_not_on_cpu() -> str:
    """Precisely why flex is not run on a CPU: it runs only compiled, and Inductor's CPU code is C++."""
    import os
    import shutil

    compiler = next((c for c in (os.environ.get("CXX"), "g++", "clang++", "c++") if c and shutil.which(c)), None)
    if compiler is None:
        return ("flex_attention runs only under torch.compile, whose CPU code is C++, and no C++ compiler is "
                "here ($CXX, g++, clang++ or c++ on PATH)")
    return (f"flex_attention runs only under torch.compile, whose CPU code is C++ ({compiler}): its first call "
            f"builds for minutes on {os.cpu_count()} cores, so attnprof measures flex on a GPU only")


VARIANTS = [Variant("flex", "flex", "flex_attention, compiled, block mask", build_flex, supports=supports_flex)]
