"""Host side of the backward: its configurations and the three launches (_backward_kernels.py says what
each pass computes). Every pass is deterministic: each output element is written by one program."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._backward_kernels import flash_attn_triton_bwd_dkdv, flash_attn_triton_bwd_dq, flash_attn_triton_bwd_preprocess
from ._forward import LOG2_E
from ._launch import cdiv
from ._plans import aligned, run_planned


class BackwardConfig(NamedTuple):
    """Tiles of the two main passes: dK/dV programs own dkdv_n keys and walk dkdv_m query rows at a time;
    dQ programs own dq_m query rows and walk dq_n keys at a time."""
    dkdv_m: int
    dkdv_n: int
    dq_m: int
    dq_n: int
    warps: int
    stages: int


# sm_90, bf16/fp16: the fastest of benchmarks/triton_backward.py --sweep on the H200 (docs/kernel.md)
CONFIGS = {64: BackwardConfig(64, 64, 64, 64, warps=4, stages=3),
           128: BackwardConfig(64, 128, 128, 64, warps=8, stages=3)}
INTERPRETER_CONFIG = BackwardConfig(16, 32, 32, 16, warps=4, stages=1)  # several blocks each way, odd ends
PREPROCESS_BLOCK = 128


def launches(q: torch.Tensor, k: torch.Tensor, sm_scale: float, causal: bool, causal_off: int,
             config: BackwardConfig) -> list[tuple]:
    """(kernel, grid, its arguments other than tensors, options) of the three passes, in order."""
    batch, heads, sq, head_dim = q.shape
    kv_heads, sk = k.shape[1], k.shape[2]
    shared = {"sm_scale": sm_scale, "qk_scale": sm_scale * LOG2_E, "SQ": sq, "SK": sk, "causal_off": causal_off,
              "GROUP": heads // kv_heads, "HEAD_DIM": head_dim, "CAUSAL": causal}
    options = {"num_warps": config.warps, "num_stages": config.stages}
    return [
        (flash_attn_triton_bwd_preprocess, (cdiv(sq, PREPROCESS_BLOCK), batch * heads),
         {"SQ": sq, "HEAD_DIM": head_dim, "BLOCK_M": PREPROCESS_BLOCK}, {}),
        (flash_attn_triton_bwd_dkdv, (cdiv(sk, config.dkdv_n), batch * kv_heads),
         {**shared, "BLOCK_M": config.dkdv_m, "BLOCK_N": config.dkdv_n, "EVEN_M": sq % config.dkdv_m == 0}, options),
        (flash_attn_triton_bwd_dq, (cdiv(sq, config.dq_m), batch * heads),
         {**shared, "BLOCK_M": config.dq_m, "BLOCK_N": config.dq_n}, options),
    ]


_PLANS: dict = {}  # per shape and dtype on a GPU: the three passes' CompiledLaunch (_plans.py)


def backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
             dout: torch.Tensor, *, sm_scale: float, causal: bool, causal_off: int,
             config: BackwardConfig) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV (dtypes and shapes of q, k, v) from the forward's output and natural-log LSE."""
    q, k, v, out, dout = (t if t.is_contiguous() else t.contiguous() for t in (q, k, v, out, dout))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    tensors = {"Q": q, "K": k, "V": v, "Out": out, "dOut": dout, "dO": dout, "LSE": lse,
               "Delta": torch.empty_like(lse), "dQ": dq, "dK": dk, "dV": dv}
    key = (q.shape, k.shape, q.dtype, q.device, sm_scale, causal, causal_off, config,
           aligned(q, k, v, out, dout, lse))
    run_planned(_PLANS, key, lambda: launches(q, k, sm_scale, causal, causal_off, config), tensors)
    return dq, dk, dv
