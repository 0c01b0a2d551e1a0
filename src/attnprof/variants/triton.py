"""attnprof's own FlashAttention forward in Triton (src/attnprof/kernels/flash_attn_triton), as a variant.

It is loaded the way a hub kernel is, through `kernels.get_local_kernel` on its kernels-layout folder,
when the `kernels` package is installed; else it is imported from that folder. [B, H, S, D] like
SDPA; grouped K/V heads (GQA) go to the kernel as they are; a causal mask is aligned to the bottom
right when there are fewer queries than keys (a decode call). It takes no window, documents or mask
tensor. The forward is written for Hopper: a Gluon kernel with FlashAttention-3's schedule where it
applies, a plain Triton kernel (TMA, warp specialisation) elsewhere; a training step's backward
recomputes the softmax in PyTorch from the saved log-sum-exp. On CPU it runs only under
Triton's interpreter (TRITON_INTERPRET=1 set before starting), in float16, on tiny problems.
"""

from __future__ import annotations

import os

from attnprof.problem import Problem, parse_mask
from attnprof.variants.base import BuildOptions, Forward, Variant, VariantUnavailable

HEAD_DIMS = (64, 128)
INTERPRETER_MAX_SCORES = 1 << 20  # B * Hq * Sq * Sk the interpreter gets through in seconds


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _refuses_problem(problem: Problem) -> str | None:
    if problem.dtype not in ("bf16", "fp16"):
        return f"flash_attn_triton computes in bf16 or fp16, not {problem.dtype}"
    if problem.head_dim not in HEAD_DIMS:
        return f"flash_attn_triton has tiles for head dims {' and '.join(map(str, HEAD_DIMS))}, not {problem.head_dim}"
    kind, _ = parse_mask(problem.mask)
    if problem.dense_mask or kind not in ("causal", "none"):
        given = "a mask tensor (--dense-mask)" if problem.dense_mask else f"--mask {problem.mask}"
        return f"flash_attn_triton masks causally or not at all; it takes no {given}"
    return None


def _refuses_device(problem: Problem, device: str) -> str | None:
    if device == "cuda":
        import torch

        major, minor = torch.cuda.get_device_capability()
        if major < 9:
            return f"flash_attn_triton needs sm_90 (Hopper) or newer for its TMA descriptors, not sm_{major}{minor}"
        return None
    if not interpreting():
        return "flash_attn_triton runs on CUDA GPUs; on CPU only under Triton's interpreter (TRITON_INTERPRET=1)"
    if problem.dtype == "bf16":
        return "Triton's interpreter multiplies bfloat16 as raw bits (triton-lang/triton#11584); use --dtype fp16"
    scores = problem.batch * problem.heads * problem.q_len * problem.seq
    if scores > INTERPRETER_MAX_SCORES:
        return f"too large for Triton's interpreter ({scores} scores > {INTERPRETER_MAX_SCORES}); shrink the problem"
    return None


def supports_triton(problem: Problem, device: str) -> str | None:
    try:
        import triton  # noqa: F401
    except ImportError:
        return "Triton is not installed (pip install triton; torch's CUDA wheels bring it)"
    return _refuses_problem(problem) or _refuses_device(problem, device)


def build_triton(problem: Problem, device: str, options: BuildOptions) -> Forward:
    from attnprof.kernels import load_flash_attn_triton

    try:
        module, _ = load_flash_attn_triton()
    except Exception as e:  # a broken install or kernel folder is a reason, not a traceback
        raise VariantUnavailable(f"loading flash_attn_triton failed: {type(e).__name__}: {e}") from e
    causal = problem.causal
    offset = problem.seq - problem.q_len if causal else 0  # decode: the queries sit at the cache's end

    def flash_attn_triton(q, k, v):  # [B, H, S, D] in and out
        return module.attention(q, k, v, causal=causal, causal_offset=offset)

    return flash_attn_triton


VARIANTS = [
    # opt-in (--variants triton): its first call of a shape autotunes the plain kernel (tens of seconds of
    # compiling), which a default `attnprof run` should not pay for a variant nobody asked for (docs/kernel.md)
    Variant("triton", "triton", "attnprof's FlashAttention (Gluon FA3 schedule on sm_90, plain Triton "
            "elsewhere), loaded like a hub kernel; opt-in: --variants triton", build_triton,
            supports=supports_triton, by_default=False)
]
