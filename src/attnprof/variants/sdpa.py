"""F.scaled_dot_product_attention, unpinned or pinned to one backend with sdpa_kernel."""

from __future__ import annotations

from functools import partial

from attnprof.problem import Problem
from attnprof.variants.base import BuildOptions, Forward, Variant

# variant suffix -> SDPBackend member name
BACKENDS = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION"}
CUDA_ONLY = {"efficient": "memory-efficient", "cudnn": "cuDNN"}


def build_sdpa(problem: Problem, device: str, options: BuildOptions, backend: str | None) -> Forward:
    import torch.nn.functional as F

    causal = problem.causal
    if backend is None:

        def sdpa_auto(q, k, v):  # [B, H, S, D] in and out; SDPA picks the backend
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        return sdpa_auto
    from torch.nn.attention import SDPBackend, sdpa_kernel

    member = getattr(SDPBackend, BACKENDS[backend])

    def sdpa_pinned(q, k, v):
        # pinning per call is what users write; it costs host time the report shows
        with sdpa_kernel(member):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

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
