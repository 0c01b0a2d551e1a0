"""Host side of the backward: its configurations and the three launches (_backward_kernels.py says what
each pass computes). Every pass is deterministic: each output element is written by one program.

Like the forward, the passes take q, k, v, the output and dO where they lie, each through its matrix view
(_tma_views.py), and write dQ, dK, dV in the layout of q, k, v: a caller on [B, S, H, D] pays no copy."""

from __future__ import annotations

from typing import NamedTuple

import torch

from .._head_tiles import head_dim_constexprs
from .._launch import cdiv
from .._plans import aligned, run_planned
from .._tma_views import contiguous_copy, empty_in_layout_of, kernel_args, matrix_view
from ..forward._forward import LOG2_E
from ._backward_kernels import flash_attn_triton_bwd_dkdv, flash_attn_triton_bwd_dq, flash_attn_triton_bwd_preprocess


class BackwardConfig(NamedTuple):
    """Tiles of the two main passes: dK/dV programs own dkdv_n keys and walk dkdv_m query rows at a time;
    dQ programs own dq_m query rows and walk dq_n keys at a time."""
    dkdv_m: int
    dkdv_n: int
    dq_m: int
    dq_n: int
    warps: int
    stages: int


# sm_90, bf16/fp16, by q's head dim: the fastest of benchmarks/kernel/triton_backward.py --sweep on the H200
# (docs/kernel.md) at 64 and 128; at 256 and 192 (v 128) the fastest of benchmarks/kernel/triton_wide_configs.py
# on the H100 (B2 H16 S4096 causal, 5 alternating rounds): 64 keys a dK/dV program, whose products compile to
# wgmma where 32 keys gave mma.sync, at 0.56x the time of the 32-key tiles at 256 (session 19, despite 664 bytes of
# spill); at 192/128, with Q, K and dK as 128 + 64 columns (session 21), 128 keys a dK/dV program at 0.68x the time
# of session 19's 64 (0.68-0.69; session 22); not measured on the H200
CONFIGS = {64: BackwardConfig(64, 64, 64, 64, warps=4, stages=3),
           128: BackwardConfig(64, 128, 128, 64, warps=8, stages=3),
           192: BackwardConfig(32, 128, 64, 64, warps=8, stages=2),
           256: BackwardConfig(64, 64, 64, 64, warps=8, stages=2)}
INTERPRETER_CONFIG = BackwardConfig(16, 32, 32, 16, warps=4, stages=1)  # several blocks each way, odd ends
PREPROCESS_BLOCK = 128


# each tensor's matrix view (_tma_views.py) by its kernel parameter, and what the passes read of it
VIEW_PREFIXES = {"Q": "q", "K": "k", "V": "v", "Out": "o", "dO": "do", "dQ": "dq", "dK": "dk", "dV": "dv"}
VIEW_FIELDS = ("stride", "row_b", "row_h", "col_h")  # pointer loads: where each head starts, the row stride


def view_args(tensors: dict) -> dict:
    """Every tensor's view numbers as the passes' arguments (q_stride, q_row_b, ... dv_col_h)."""
    return {name: value for param, prefix in VIEW_PREFIXES.items()
            for name, value in kernel_args(prefix, matrix_view(tensors[param]), VIEW_FIELDS).items()}


def launches(tensors: dict, sm_scale: float, causal: bool, causal_off: int, config: BackwardConfig) -> list[tuple]:
    """(kernel, grid, its arguments other than tensors, options) of the three passes, in order."""
    batch, heads, sq, _ = tensors["Q"].shape
    kv_heads, sk = tensors["K"].shape[1], tensors["K"].shape[2]
    views = view_args(tensors)
    shared = {"sm_scale": sm_scale, "qk_scale": sm_scale * LOG2_E, "SQ": sq, "SK": sk, "causal_off": causal_off,
              "HEADS": heads, "GROUP": heads // kv_heads, **head_dim_constexprs(tensors["Q"], tensors["V"]),
              "CAUSAL": causal}
    options = {"num_warps": config.warps, "num_stages": config.stages}
    passes = [
        (flash_attn_triton_bwd_preprocess, (cdiv(sq, PREPROCESS_BLOCK), batch * heads),
         {"SQ": sq, "HEADS": heads, "HEAD_DIM": shared["HEAD_DIM_V"], "BLOCK_M": PREPROCESS_BLOCK}, {}),  # O's, dO's
        (flash_attn_triton_bwd_dkdv, (cdiv(sk, config.dkdv_n), batch * kv_heads),
         {**shared, "BLOCK_M": config.dkdv_m, "BLOCK_N": config.dkdv_n, "EVEN_M": sq % config.dkdv_m == 0}, options),
        (flash_attn_triton_bwd_dq, (cdiv(sq, config.dq_m), batch * heads),
         {**shared, "BLOCK_M": config.dq_m, "BLOCK_N": config.dq_n,
          "KV_STRIDE_SHARED": views["k_stride"] == views["v_stride"]}, options),
    ]
    return [(kernel, grid, {**params, **{n: views[n] for n in kernel.arg_names if n in views}}, opts)
            for kernel, grid, params, opts in passes]


_PLANS: dict = {}  # per shape, strides and dtype on a GPU: the three passes' CompiledLaunch (_plans.py)
_COPIED: dict = {}  # per the same key: which of q, k, v, out, dO a pointer-and-TMA view cannot read in place


def readable_inputs(inputs: tuple[torch.Tensor, ...], key) -> tuple[torch.Tensor, ...]:
    """The inputs where they lie, but copies of those matrix_view cannot take (the forward's rule: a last
    dimension that is not contiguous, a misaligned address or stride); which ones is fixed by the key."""
    copied = _COPIED.get(key)
    if copied is None:
        copied = _COPIED[key] = tuple(matrix_view(t) is None for t in inputs)
    if not any(copied):
        return inputs
    return tuple(contiguous_copy(t) if copy else t for t, copy in zip(inputs, copied, strict=True))


def backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
             dout: torch.Tensor, *, sm_scale: float, causal: bool, causal_off: int,
             config: BackwardConfig, key=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV (dtypes and shapes of q, k, v, laid out as q, k, v are: _tma_views.empty_in_layout_of)
    from the forward's output and natural-log LSE; every input read where it lies unless it must be copied.
    `key`: the caller's for every shape, stride, alignment, dtype and scalar of these tensors (_ops: the
    forward's plan, dO's layout and the config), in place of the one built here (~8 us of host time)."""
    inputs = (q, k, v, out, dout)
    if key is None:
        key = (q.shape, k.shape, tuple(t.stride() for t in inputs), tuple(aligned(t) for t in inputs), q.dtype,
               q.device, sm_scale, causal, causal_off, config, aligned(lse))
    dq, dk, dv = empty_in_layout_of(q), empty_in_layout_of(k), empty_in_layout_of(v)  # as the fake op's are
    q, k, v, out, dout = readable_inputs(inputs, key)
    tensors = {"Q": q, "K": k, "V": v, "Out": out, "dOut": dout, "dO": dout, "LSE": lse,
               "Delta": torch.empty_like(lse), "dQ": dq, "dK": dk, "dV": dv}
    run_planned(_PLANS, key, lambda: launches(tensors, sm_scale, causal, causal_off, config), tensors)
    return dq, dk, dv
