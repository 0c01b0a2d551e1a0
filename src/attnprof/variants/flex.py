"""flex_attention under torch.compile with a causal block mask built once."""

from __future__ import annotations

from attnprof.problem import Problem
from attnprof.variants.base import BuildOptions, Forward, Variant


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def build_flex(problem: Problem, device: str, options: BuildOptions) -> Forward:
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    # the block mask is built once, outside the forward, as the flex docs advise
    block_mask = create_block_mask(_causal, None, None, problem.seq, problem.seq, device=device)
    compiled = torch.compile(flex_attention)

    def flex(q, k, v):  # [B, H, S, D]
        return compiled(q, k, v, block_mask=block_mask)

    return flex


def supports_flex(problem: Problem, device: str) -> str | None:
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError as e:
        return f"flex_attention is not in this torch ({e})"
    if device == "cpu":
        return "flex_attention on CPU compiles C++ for minutes on small machines; run it on a GPU"
    return None


VARIANTS = [Variant("flex", "flex", "flex_attention, compiled, causal block mask", build_flex, supports=supports_flex)]
