"""The baseline for attnprof's Triton attention: the public fused-attention tutorial's TMA forward, restated.

What it keeps from the tutorial (python/tutorials/06-fused-attention.py, the TensorDescriptor path):
a grid of (query block, batch*head) programs in launch order, host TMA descriptors over the
flattened [B*H*S, D] tensors, the causal loop split into the off-diagonal blocks and the diagonal
band, software pipelining only (no warp specialisation, no persistent grid), a TMA store of the
output, and its autotuning space (BLOCK_M 64/128, BLOCK_N 32/64/128, 2/3/4/6 stages, 4/8 warps, no
8 warps for tiles under 128x128 on Hopper). One fix: the row offset is off_z*(H*S) + off_h*S (the
revision we read had off_z + off_h*S, right only for batch 1). Sequence lengths must be multiples
of BLOCK_M (as in the tutorial), heads equal for q, k, v.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

LOG2_E = 1.4426950408889634


@triton.jit
def _band(acc, l_i, m_i, q, desc_k, desc_v, row0, start_m, qk_scale, offs_m, offs_n,
          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGE: tl.constexpr, N_CTX):
    if STAGE == 1:  # causal, below the diagonal band: no mask
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:  # causal, the diagonal band
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
    else:  # not causal: every key
        lo, hi = 0, N_CTX
    for start_n in range(lo, hi, BLOCK_N):
        k = desc_k.load([row0 + start_n, 0])
        qk = tl.dot(q, k.T)
        if STAGE == 2:
            qk = qk * qk_scale + tl.where(offs_m[:, None] >= start_n + offs_n[None, :], 0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = desc_v.load([row0 + start_n, 0])
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_ij
    return acc, l_i, m_i


def _block_shapes(nargs):
    nargs["desc_q"].block_shape = [nargs["BLOCK_M"], nargs["HEAD_DIM"]]
    nargs["desc_o"].block_shape = [nargs["BLOCK_M"], nargs["HEAD_DIM"]]
    nargs["desc_k"].block_shape = [nargs["BLOCK_N"], nargs["HEAD_DIM"]]
    nargs["desc_v"].block_shape = [nargs["BLOCK_N"], nargs["HEAD_DIM"]]


def tutorial_configs() -> list[triton.Config]:
    configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=s, num_warps=w, pre_hook=_block_shapes)
               for bm in (64, 128) for bn in (32, 64, 128) for s in (2, 3, 4, 6) for w in (4, 8)]
    return [c for c in configs if not (c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] < 128 * 128 and c.num_warps == 8)]


def _short_enough(configs, named_args, **kwargs):
    return [c for c in configs if c.kwargs["BLOCK_M"] <= kwargs["N_CTX"]
            and (c.kwargs["BLOCK_N"] <= c.kwargs["BLOCK_M"] or kwargs["STAGE"] == 1)]


@triton.autotune(tutorial_configs(), key=["N_CTX", "HEAD_DIM", "STAGE"],
                 prune_configs_by={"early_config_prune": _short_enough})
@triton.jit
def tutorial_fwd(sm_scale, M, H, desc_q, desc_k, desc_v, desc_o, N_CTX,
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGE: tl.constexpr):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    row0 = (off_hz // H) * (N_CTX * H) + (off_hz % H) * N_CTX  # the tutorial's offset, fixed for batch > 1
    q_row = row0 + start_m * BLOCK_M
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    q = desc_q.load([q_row, 0])
    if STAGE & 1:
        acc, l_i, m_i = _band(acc, l_i, m_i, q, desc_k, desc_v, row0, start_m, qk_scale, offs_m, offs_n,
                              BLOCK_M, BLOCK_N, 4 - STAGE, N_CTX)
    if STAGE & 2:
        acc, l_i, m_i = _band(acc, l_i, m_i, q, desc_k, desc_v, row0, start_m, qk_scale, offs_m, offs_n,
                              BLOCK_M, BLOCK_N, 2, N_CTX)
    m_i += tl.math.log2(l_i)
    tl.store(M + off_hz * N_CTX + offs_m, m_i)
    desc_o.store([q_row, 0], (acc / l_i[:, None]).to(desc_o.dtype))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
              config: triton.Config | None = None, compile_only: bool = False) -> torch.Tensor:
    """The tutorial's forward on contiguous [B, H, S, D] q, k, v of one shape; returns the output.
    With `config`, that configuration runs instead of the autotuned choice (with compile_only, it is
    compiled and not run)."""
    batch, heads, n_ctx, head_dim = q.shape
    out = torch.empty_like(q)
    lse = torch.empty((batch, heads, n_ctx), device=q.device, dtype=torch.float32)
    rows = batch * heads * n_ctx
    descs = [TensorDescriptor(t, [rows, head_dim], [head_dim, 1], [16, head_dim]) for t in (q, k, v, out)]
    args = (head_dim ** -0.5, lse, heads, *descs, n_ctx)
    meta = {"HEAD_DIM": head_dim, "STAGE": 3 if causal else 1}

    def grid(meta):
        return (triton.cdiv(n_ctx, meta["BLOCK_M"]), batch * heads, 1)

    if config is None:
        tutorial_fwd[grid](*args, **meta)
    else:
        _block_shapes({"desc_q": descs[0], "desc_k": descs[1], "desc_v": descs[2], "desc_o": descs[3],
                       **meta, **config.kwargs})
        launch = tutorial_fwd.fn.warmup if compile_only else tutorial_fwd.fn[grid]
        extra = {"grid": (1, 1, 1)} if compile_only else {}
        launch(*args, **meta, **config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages, **extra)
    return out
