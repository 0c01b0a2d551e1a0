"""Autograd for the masked forward (masks.py), and the host side of its Triton backward.

The backward is _masked_backward_kernels.py's passes: delta per token, then dK/dV per key block over the
query blocks that see it (masks.query_range) and dQ per query block over the key blocks it sees
(masks.key_range, the forward's own), both from the forward's saved LSE, skipping what the mask empties
and masking only the edges. Like the dense backward it is deterministic (no atomics) and launched
through a plan per shape on a GPU (_plans.run_planned).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._backward import PREPROCESS_BLOCK
from ._forward import LOG2_E
from ._launch import cdiv, wants_grad
from ._masked_backward_kernels import (
    flash_attn_triton_bwd_dkdv_masked,
    flash_attn_triton_bwd_dq_masked,
    flash_attn_triton_bwd_preprocess_tokens,
)
from ._plans import aligned, run_planned
from .masks import masked_forward


class MaskedBackwardConfig(NamedTuple):
    """Tiles, warps and stages of the dK/dV pass (programs own dkdv_n keys, walk dkdv_m rows at a time) and
    of the dQ pass (own dq_m rows, walk dq_n keys)."""
    dkdv_m: int
    dkdv_n: int
    dkdv_warps: int
    dkdv_stages: int
    dq_m: int
    dq_n: int
    dq_warps: int
    dq_stages: int


# sm_90, bf16/fp16, D128: the fastest of benchmarks/triton_masked_backward.py --part sweep on the H200 at
# all three of its mask cases (docs/kernel.md); D64 was not measured (the dense backward's tiles)
CONFIGS = {64: MaskedBackwardConfig(64, 64, 4, 2, 64, 64, 4, 3),
           128: MaskedBackwardConfig(64, 128, 8, 2, 128, 64, 8, 3)}
INTERPRETER_CONFIG = MaskedBackwardConfig(16, 32, 4, 1, 32, 16, 4, 1)  # several blocks each way, odd ends


def launches(q: torch.Tensor, k: torch.Tensor, scale: float, window: tuple[int, int], bottom_right: bool,
             sequences: int, max_q: int, max_k: int, config: MaskedBackwardConfig) -> list[tuple]:
    """(kernel, grid, its arguments other than tensors, options) of the three passes, in order: q [B, Tq,
    Hq, D] (strides shared by dO and dQ), k [B, Tk, Hkv, D] (shared by v, dK, dV)."""
    batch, tokens, hq, head_dim = q.shape
    hkv = k.shape[2]
    strides = dict(zip(("stride_qb", "stride_qt", "stride_qh", "stride_kb", "stride_kt", "stride_kh"),
                       q.stride()[:3] + k.stride()[:3], strict=True))
    shared = {"sm_scale": scale, "qk_scale": scale * LOG2_E, **strides, "HQ": hq, "lse_tokens": tokens,
              "left": window[0], "right": window[1], "GROUP": hq // hkv, "HEAD_DIM": head_dim,
              "BOTTOM_RIGHT": bottom_right}
    return [
        (flash_attn_triton_bwd_preprocess_tokens, (cdiv(tokens, PREPROCESS_BLOCK), batch * hq),
         {"tokens": tokens, "stride_b": q.stride(0), "stride_t": q.stride(1), "stride_h": q.stride(2), "HQ": hq,
          "HEAD_DIM": head_dim, "BLOCK_M": PREPROCESS_BLOCK}, {}),
        (flash_attn_triton_bwd_dkdv_masked, (sequences * hkv, cdiv(max_k, config.dkdv_n), batch),
         {**shared, "BLOCK_M": config.dkdv_m, "BLOCK_N": config.dkdv_n},
         {"num_warps": config.dkdv_warps, "num_stages": config.dkdv_stages}),
        (flash_attn_triton_bwd_dq_masked, (sequences * hq, cdiv(max_q, config.dq_m), batch),
         {**shared, "BLOCK_M": config.dq_m, "BLOCK_N": config.dq_n},
         {"num_warps": config.dq_warps, "num_stages": config.dq_stages}),
    ]


_PLANS: dict = {}  # per shape, layout and mask on a GPU: the three passes' CompiledLaunch (_plans.py)


def _in_layout(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """t with like's strides: itself where they already agree, else a copy."""
    return t if t.stride() == like.stride() else torch.empty_like(like).copy_(t)


def masked_backward(q, k, v, out, lse, dout, cu_q: torch.Tensor, cu_k: torch.Tensor, max_q: int, max_k: int,
                    scale: float, window: tuple[int, int], bottom_right: bool,
                    config: MaskedBackwardConfig | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv for masked_forward's layout ([B, T, H, D]; lse [B, Hq, Tq]); config overrides CONFIGS
    (benchmarks)."""
    config = config or (CONFIGS[q.shape[-1]] if q.is_cuda else INTERPRETER_CONFIG)  # CPU: the interpreter
    dq, dk = torch.empty_like(out), torch.empty_like(k)  # out and dk: dense layouts the others follow
    q, dout = _in_layout(q, out), _in_layout(dout, out)
    k, v = _in_layout(k, dk), _in_layout(v, dk)
    dv = torch.empty_like(dk)
    tensors = {"Q": q, "K": k, "V": v, "Out": out, "dOut": dout, "dO": dout, "LSE": lse,
               "Delta": torch.empty_like(lse), "dQ": dq, "dK": dk, "dV": dv, "CuQ": cu_q, "CuK": cu_k}
    sequences = cu_q.numel() - 1
    key = ("masked", q.shape, k.shape, q.stride(), k.stride(), q.dtype, q.device, scale, window, bottom_right,
           sequences, max_q, max_k, config, aligned(q, k, v, out, dout, lse))
    run_planned(_PLANS, key, lambda: launches(q, k, scale, window, bottom_right, sequences, max_q, max_k, config),
                tensors)
    return dq, dk, dv


def to_kernel_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The kernels' [B, S, H, D] view of a caller's tensor: "bshd" as it is, "bhsd" transposed, "thd" (a packed
    batch, flash_attn_varlen_func's) as a batch of one."""
    return t.transpose(1, 2) if layout == "bhsd" else t.unsqueeze(0) if layout == "thd" else t


def from_kernel_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The inverse of to_kernel_layout (for outputs and gradients)."""
    return t.transpose(1, 2) if layout == "bhsd" else t[0] if layout == "thd" else t


def _lse_for(lse: torch.Tensor, layout: str) -> torch.Tensor:
    """The kernel's LSE [B, Hq, Tq] as the caller's layout has it ([Hq, total] for a packed batch)."""
    return lse[0] if layout == "thd" else lse


class MaskedAttentionFunction(torch.autograd.Function):
    """The masked forward and backward on the caller's layout: the views into and out of the kernels' layout
    are taken inside, so autograd records one node for the call, not one per view (host time per step)."""

    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, window, bottom_right,
                layout):
        q, k, v = (to_kernel_layout(t, layout) for t in (q, k, v))
        out, lse = masked_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, scale, window, bottom_right)
        ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k)
        ctx.lengths, ctx.scale, ctx.window, ctx.bottom_right = (max_seqlen_q, max_seqlen_k), scale, window, bottom_right
        ctx.layout = layout
        lse = _lse_for(lse, layout)
        ctx.mark_non_differentiable(lse)
        ctx.set_materialize_grads(False)  # else autograd fills a zero gradient for the LSE: a launch per step
        return from_kernel_layout(out, layout), lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        if dout is None:  # the loss does not depend on the output
            return (None,) * 11
        q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
        grads = masked_backward(q, k, v, out, lse, to_kernel_layout(dout, ctx.layout), cu_q, cu_k, *ctx.lengths,
                                ctx.scale, ctx.window, ctx.bottom_right)
        return (*(from_kernel_layout(g, ctx.layout) for g in grads), None, None, None, None, None, None, None, None)


def masked_attention_call(q, k, v, cu_q: torch.Tensor, cu_k: torch.Tensor, max_q: int, max_k: int, scale: float,
                          window: tuple[int, int], bottom_right: bool, layout: str = "bshd"
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) on the caller's layout (to_kernel_layout's names): through MaskedAttentionFunction where a
    gradient is wanted, else the forward alone."""
    if wants_grad(q, k, v):
        return MaskedAttentionFunction.apply(q, k, v, cu_q, cu_k, max_q, max_k, scale, window, bottom_right, layout)
    out, lse = masked_forward(*(to_kernel_layout(t, layout) for t in (q, k, v)), cu_q, cu_k, max_q, scale, window,
                              bottom_right)
    return from_kernel_layout(out, layout), _lse_for(lse, layout)
