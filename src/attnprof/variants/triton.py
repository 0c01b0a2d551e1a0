"""attnprof's own FlashAttention in Triton (src/attnprof/kernels/flash_attn_triton), as a variant.

It is loaded the way a hub kernel is, through `kernels.get_local_kernel` on its kernels-layout folder,
when the `kernels` package is installed; else it is imported from that folder. [B, H, S, D] like
SDPA; grouped K/V heads (GQA) go to the kernel as they are; a causal mask is aligned to the bottom
right when there are fewer queries than keys (a decode call). A decode call (--mode decode) runs the
split-KV decode (flash_attn_with_kvcache); --mask window=W and document=N run the masked forward, which
skips the tiles the mask empties; no mask tensor (--dense-mask). The dense forward is written for
Hopper: a Gluon kernel with FlashAttention-3's schedule where it applies, a plain Triton kernel (TMA,
warp specialisation) elsewhere; a training step's backward is three Triton passes from the saved
log-sum-exp (delta, dK/dV, dQ; masked ones skip the same tiles as their forward). On CPU it runs only under
Triton's interpreter (TRITON_INTERPRET=1 set before starting), in float16, on tiny problems.
"""

from __future__ import annotations

import os

from attnprof.problem import Problem
from attnprof.variants.base import BuildOptions, Forward, Variant, VariantUnavailable

HEAD_DIMS = (64, 128, 256)  # the kernel's _head_tiles.HEAD_DIMS (a test holds them equal), read here without loading it
INTERPRETER_MAX_SCORES = 1 << 20  # B * Hq * Sq * Sk the interpreter gets through in seconds


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _refuses_problem(problem: Problem) -> str | None:
    if problem.dtype not in ("bf16", "fp16"):
        return f"flash_attn_triton computes in bf16 or fp16, not {problem.dtype}"
    if problem.head_dim not in HEAD_DIMS:
        dims = ", ".join(map(str, HEAD_DIMS[:-1])) + f" and {HEAD_DIMS[-1]}"
        return f"flash_attn_triton has tiles for head dims {dims}, not {problem.head_dim}"
    if problem.dense_mask:
        return "flash_attn_triton skips the tiles a mask empties; it takes no mask tensor (--dense-mask)"
    if problem.mode == "decode" and problem.mask.kind == "document":
        return "flash_attn_triton's decode takes causal, window or no mask, not documents"
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
    return _forward_for(module, problem, device)


def _forward_for(module, problem: Problem, device: str) -> Forward:
    """The kernel call for the problem's mode and mask, on [B, H, S, D] tensors in and out."""
    kind, size = problem.mask.kind, problem.mask.size
    # attnprof's window=W keeps keys i-W+1..i: flash-attn's window_size=(W-1, 0) with causal
    window = (size - 1, 0) if kind == "window" else (-1, -1)
    if problem.mode == "decode":
        import torch

        lengths = torch.full((problem.batch,), problem.seq, dtype=torch.int32, device=device)

        def flash_attn_triton_decode(q, k, v):
            out = module.flash_attn_with_kvcache(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                 cache_seqlens=lengths, causal=problem.causal, window_size=window)
            return out.transpose(1, 2)

        return flash_attn_triton_decode
    if kind in ("window", "document"):
        def flash_attn_triton_masked(q, k, v):
            return module.masked_attention(q, k, v, causal=True, window_size=window,
                                           document_len=size if kind == "document" else None)

        return flash_attn_triton_masked
    causal = problem.causal

    def flash_attn_triton(q, k, v):
        return module.attention(q, k, v, causal=causal)

    return flash_attn_triton


def on_sm90() -> bool:
    """A default variant on Hopper, the GPU it is written and tuned for: there it ships its configurations
    (no autotuning on a first call); elsewhere it runs when named (--variants triton)."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


VARIANTS = [
    Variant("triton", "triton", "attnprof's FlashAttention (Gluon FA3 schedule on sm_90, plain Triton "
            "elsewhere, a Triton backward), loaded like a hub kernel; default on sm_90", build_triton,
            supports=supports_triton, by_default=on_sm90)
]
