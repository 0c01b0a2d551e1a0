"""Host side of the single-pass backward (_backward_atomic_kernels.py): its configurations and its three
launches (delta + zeroing, the dK/dV/dQ pass, dQ's conversion). dQ is summed with float32 atomics, so
its last bits may differ from run to run; _backward.py's two-pass backward is the deterministic one."""

from __future__ import annotations

from typing import NamedTuple

import torch

from .._head_tiles import head_dim_constexprs
from .._launch import _ensure_allocator, cdiv
from .._plans import aligned, run_planned
from ..forward._forward import LOG2_E
from . import _backward_hopper_launch
from ._backward_atomic_kernels import (
    flash_attn_triton_bwd_delta_zero,
    flash_attn_triton_bwd_dq_convert,
    flash_attn_triton_bwd_single,
)


class SingleConfig(NamedTuple):
    """Programs own block_n keys and walk block_m query rows at a time."""
    block_m: int
    block_n: int
    warps: int
    stages: int


# sm_90, bf16/fp16: the fastest of benchmarks/kernel/triton_backward.py --sweep on the H200 (docs/kernel.md) at 64
# and 128. At 256 and 192/128 (Q, K, dK and dQ as 128 + 64 columns, _head_tiles.py) the tiles that fit without
# spilling, not yet timed (benchmarks/kernel/triton_wide_configs.py times them against the two-pass backward and
# cuDNN): one pass of 5 products where the two-pass one runs 7, dQ added by a TMA reduce a step and part. sm_90
# ptxas, Triton 3.6, causal: 255 registers, no spill, 200,960 bytes of shared memory at 256 (64 query rows a step
# spill 144 bytes at 2 stages, 288 at one); 246, none, 135,424 at 192/128 (64 rows a step: 64 bytes)
CONFIGS = {64: SingleConfig(64, 64, warps=4, stages=3), 128: SingleConfig(64, 128, warps=8, stages=2),
           192: SingleConfig(32, 64, warps=8, stages=2), 256: SingleConfig(32, 64, warps=8, stages=2)}
INTERPRETER_CONFIG = SingleConfig(16, 32, warps=4, stages=1)  # several blocks each way, odd ends
ROW_BLOCK = 64  # rows per program of the preprocess and the postprocess


def launches(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sm_scale: float, causal: bool, causal_off: int,
             config: SingleConfig) -> list[tuple]:
    """(kernel, grid, its arguments other than tensors, options) of the three launches, in order."""
    batch, heads, sq, _ = q.shape
    kv_heads, sk = k.shape[1], k.shape[2]
    dims = head_dim_constexprs(q, v)
    rows = {"ROWS": batch * heads * sq, "HEAD_DIM": dims["HEAD_DIM"], "BLOCK": ROW_BLOCK,
            "HEAD_DIM_QK": dims["HEAD_DIM_QK"]}
    row_grid = (cdiv(batch * heads * sq, ROW_BLOCK),)
    main = {"sm_scale": sm_scale, "qk_scale": sm_scale * LOG2_E, "SQ": sq, "SK": sk, "causal_off": causal_off,
            "GROUP": heads // kv_heads, **dims, "BLOCK_M": config.block_m, "BLOCK_N": config.block_n,
            "CAUSAL": causal, "EVEN_M": sq % config.block_m == 0, "ROWS": batch * heads * sq, "DQ_TMA": q.is_cuda}
    return [
        (flash_attn_triton_bwd_delta_zero, row_grid, {**rows, "HEAD_DIM_V": dims["HEAD_DIM_V"]}, {}),
        (flash_attn_triton_bwd_single, (cdiv(sk, config.block_n), batch * kv_heads), main,
         {"num_warps": config.warps, "num_stages": config.stages}),
        (flash_attn_triton_bwd_dq_convert, row_grid, {**rows, "sm_scale": sm_scale}, {}),
    ]


_PLANS: dict = {}  # per shape and dtype on a GPU: the three launches' CompiledLaunch (_plans.py)


def backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
             dout: torch.Tensor, *, sm_scale: float, causal: bool, causal_off: int,
             config: SingleConfig, key=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV (dtypes and shapes of q, k, v) from the forward's output and natural-log LSE: through the
    warp-specialised Gluon kernel (_backward_hopper.py) where FLASH_ATTN_TRITON_ATOMIC_DQ and the inputs
    choose it (_backward_hopper_launch.chosen), else through the plain Triton one. `key`: as
    _backward.backward's."""
    if _backward_hopper_launch.chosen(q, k, v, out, dout, causal, causal_off):
        grads = _backward_hopper_launch.backward(q, k, v, out, lse, dout, sm_scale=sm_scale, causal=causal)
        if grads is not None:
            return grads
    q, k, v, out, dout = (t if t.is_contiguous() else t.contiguous() for t in (q, k, v, out, dout))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    tensors = {"Q": q, "K": k, "V": v, "Out": out, "dOut": dout, "dO": dout, "LSE": lse,
               "Delta": torch.empty_like(lse), "dQacc": torch.empty(q.shape, dtype=torch.float32, device=q.device),
               "dQ": dq, "dK": dk, "dV": dv}
    if key is None:
        key = (q.shape, k.shape, q.dtype, q.device, sm_scale, causal, causal_off, config,
               aligned(q, k, v, out, dout, lse))
    if q.is_cuda and key not in _PLANS:
        _ensure_allocator()  # global memory for the TMA descriptor each program makes
    run_planned(_PLANS, key, lambda: launches(q, k, v, sm_scale, causal, causal_off, config), tensors)
    return dq, dk, dv
