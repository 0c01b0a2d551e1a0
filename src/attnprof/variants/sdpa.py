"""F.scaled_dot_product_attention, unpinned or pinned to one backend with sdpa_kernel.

Each problem is given to SDPA the way its docs say: grouped K/V heads with enable_gqa=True, a causal
mask with is_causal=True (a decode call's queries follow the cache, so several of them take
causal_lower_right; one sees the whole cache and needs no mask), and with --dense-mask, or for a window
or documents (SDPA has no argument for those), the mask as a boolean [Sq, Sk] attn_mask. What a backend
refuses, torch says in its own words at the first call; the runner records them.
"""

from __future__ import annotations

from functools import partial

from attnprof.problem import Problem, allowed
from attnprof.variants.base import BuildOptions, Forward, Variant, VariantUnavailable

# variant suffix -> SDPBackend member name
BACKENDS = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION"}
CUDA_ONLY = {"efficient": "memory-efficient", "cudnn": "cuDNN"}


def sdpa_kwargs(problem: Problem, device: str) -> dict:
    """The keyword arguments that give `problem` to scaled_dot_product_attention."""
    kwargs = {"enable_gqa": True} if problem.groups > 1 else {}
    if problem.mask.kind == "none":
        return kwargs
    if problem.dense_mask:
        return kwargs | {"attn_mask": allowed(problem, device)}  # [Sq, Sk], broadcast over B and H
    if problem.mask.kind != "causal":
        raise VariantUnavailable(f"scaled_dot_product_attention has no argument for --mask {problem.mask}; "
                                 "--dense-mask gives it the mask as a boolean [Sq, Sk] tensor")
    if problem.q_len == problem.seq:
        return kwargs | {"is_causal": True}
    if problem.q_len == 1:
        return kwargs  # the one new query sees the whole cache
    from torch.nn.attention.bias import causal_lower_right

    return kwargs | {"attn_mask": causal_lower_right(problem.q_len, problem.seq)}


def build_sdpa(problem: Problem, device: str, options: BuildOptions, backend: str | None) -> Forward:
    import torch.nn.functional as F

    kwargs = sdpa_kwargs(problem, device)
    if backend is None:

        def sdpa_auto(q, k, v):  # [B, H, S, D] in and out; SDPA picks the backend
            return F.scaled_dot_product_attention(q, k, v, **kwargs)

        return sdpa_auto
    from torch.nn.attention import SDPBackend, sdpa_kernel

    member = getattr(SDPBackend, BACKENDS[backend])

    def sdpa_pinned(q, k, v):
        # pinning per call is what users write; it costs host time the report shows
        with sdpa_kernel(member):
            return F.scaled_dot_product_attention(q, k, v, **kwargs)

    sdpa_pinned.__name__ = f"sdpa_{backend}"
    return sdpa_pinned


def _supports(backend: str, problem: Problem, device: str) -> str | None:
    if backend in CUDA_ONLY and device == "cpu":
        return f"SDPA's {CUDA_ONLY[backend]} backend has no CPU kernel (CUDA only)"
    return None  # the rest torch decides at the first call; the runner records its reasons


VARIANTS = [Variant("sdpa-auto", "sdpa", "SDPA, backend chosen by torch", partial(build_sdpa, backend=None))] + [
    Variant(
        f"sdpa-{b}", "sdpa", f"SDPA pinned to the {b} backend",
        partial(build_sdpa, backend=b), supports=partial(_supports, b),
    )
    for b in BACKENDS
]
