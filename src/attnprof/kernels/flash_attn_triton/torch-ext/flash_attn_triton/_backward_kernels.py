"""The backward kernels: FlashAttention-2's backward in three deterministic passes, never S x S in memory.

With P = exp(S * scale - LSE) recomputed from the forward's saved natural-log LSE (S = Q K^T):
  1. preprocess: delta_i = rowsum(dO_i * O_i), one float per query row;
  2. dK/dV: one program per block of BLOCK_N keys of one key/value head walks the query blocks that can
     see them (causal: from the diagonal down), for each query head of its GQA group, accumulating
        dV += P^T dO,   dS = P * (dO V^T - delta),   dK += dS^T Q * scale
     in float32 registers: the group's query heads are reduced here, so K and V are never expanded and
     no two programs write the same key (no atomics);
  3. dQ: one program per block of BLOCK_M query rows walks the key blocks they see (causal: up to the
     diagonal), dQ += dS K * scale; its own pass, so dQ needs no float32 atomics and is deterministic.
Causal blocks that no query of a tile can see are skipped; only the blocks the diagonal crosses (and a
ragged sequence end) are masked, in loops of their own. The exponent is taken in base 2: the scale
times log2(e) is folded into one multiply, and LSE is converted to base 2 once per query block.
Tensors are contiguous [batch * heads, seq, HEAD_DIM]; row offsets inside a head fit in 32 bits.
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2_E_C = tl.constexpr(1.4426950408889634)


@triton.jit
def flash_attn_triton_bwd_preprocess(Out, dOut, Delta, SQ, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """Grid (query blocks, batch * heads): delta = rowsum(dO * O) in float32."""
    bh = tl.program_id(1).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    in_seq = offs_m < SQ
    ptrs = bh * SQ * HEAD_DIM + offs_m[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    o = tl.load(Out + ptrs, mask=in_seq[:, None], other=0.0).to(tl.float32)
    do = tl.load(dOut + ptrs, mask=in_seq[:, None], other=0.0).to(tl.float32)
    tl.store(Delta + bh * SQ + offs_m, tl.sum(o * do, 1), mask=in_seq)


@triton.jit
def _dkdv_query_block(dk, dv, k, v, Q, dO, LSE, Delta, q_head, start_m, offs_n, SQ, causal_off, qk_scale,
                      HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, CAUSAL_MASK: tl.constexpr,
                      EVEN_M: tl.constexpr):
    """One block of BLOCK_M query rows against the program's keys: P^T and dS^T are [BLOCK_N, BLOCK_M]."""
    offs_m = start_m + tl.arange(0, BLOCK_M)
    ptrs = q_head * HEAD_DIM + offs_m[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    if EVEN_M:
        q = tl.load(Q + ptrs)
        do = tl.load(dO + ptrs)
        lse = tl.load(LSE + q_head + offs_m)
        delta = tl.load(Delta + q_head + offs_m)
    else:  # rows past the end: LSE = +inf makes their P exactly 0
        in_seq = offs_m < SQ
        q = tl.load(Q + ptrs, mask=in_seq[:, None], other=0.0)
        do = tl.load(dO + ptrs, mask=in_seq[:, None], other=0.0)
        lse = tl.load(LSE + q_head + offs_m, mask=in_seq, other=float("inf"))
        delta = tl.load(Delta + q_head + offs_m, mask=in_seq, other=0.0)
    p_t = tl.math.exp2(tl.dot(k, tl.trans(q)) * qk_scale - (lse * LOG2_E_C)[None, :])
    if CAUSAL_MASK:  # key j is visible to query i when j <= i + causal_off
        p_t = tl.where(offs_n[:, None] <= offs_m[None, :] + causal_off, p_t, 0.0)
    dv += tl.dot(p_t.to(do.dtype), do)
    dp_t = tl.dot(v, tl.trans(do))
    ds_t = p_t * (dp_t - delta[None, :])
    dk += tl.dot(ds_t.to(q.dtype), q)
    return dk, dv


@triton.jit
def flash_attn_triton_bwd_dkdv(Q, K, V, dO, LSE, Delta, dK, dV, sm_scale, qk_scale, SQ, SK, causal_off,
                               GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                               BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, EVEN_M: tl.constexpr):
    """Grid (key blocks, batch * key/value heads): dK and dV of BLOCK_N keys, summed over the GQA group."""
    kv_bh = tl.program_id(1).to(tl.int64)
    start_n = tl.program_id(0) * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    kv_ptrs = kv_bh * SK * HEAD_DIM + offs_n[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    in_keys = offs_n < SK
    k = tl.load(K + kv_ptrs, mask=in_keys[:, None], other=0.0)
    v = tl.load(V + kv_ptrs, mask=in_keys[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    n_m = tl.cdiv(SQ, BLOCK_M)
    if CAUSAL:  # query blocks before lo see none of these keys; from full_lo on they see all of them
        lo = tl.maximum(start_n - causal_off, 0) // BLOCK_M
        full_lo = tl.minimum(tl.maximum(tl.cdiv(start_n + BLOCK_N - 1 - causal_off, BLOCK_M), lo), n_m)
    else:
        lo = 0
        full_lo = 0
    for g in range(GROUP):
        q_head = (kv_bh * GROUP + g) * SQ
        for m in range(lo, full_lo):
            dk, dv = _dkdv_query_block(dk, dv, k, v, Q, dO, LSE, Delta, q_head, m * BLOCK_M, offs_n, SQ,
                                       causal_off, qk_scale, HEAD_DIM, BLOCK_M, True, EVEN_M)
        for m in range(full_lo, n_m):
            dk, dv = _dkdv_query_block(dk, dv, k, v, Q, dO, LSE, Delta, q_head, m * BLOCK_M, offs_n, SQ,
                                       causal_off, qk_scale, HEAD_DIM, BLOCK_M, False, EVEN_M)
    tl.store(dV + kv_ptrs, dv.to(dV.dtype.element_ty), mask=in_keys[:, None])
    tl.store(dK + kv_ptrs, (dk * sm_scale).to(dK.dtype.element_ty), mask=in_keys[:, None])


@triton.jit
def _dq_key_block(dq, q, do, lse2, delta, K, V, kv_head, start_n, offs_m, SK, causal_off, qk_scale,
                  HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr):
    """One block of BLOCK_N keys against the program's query rows."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    ptrs = kv_head + offs_n[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    if MASKED:
        k = tl.load(K + ptrs, mask=(offs_n < SK)[:, None], other=0.0)
        v = tl.load(V + ptrs, mask=(offs_n < SK)[:, None], other=0.0)
    else:
        k = tl.load(K + ptrs)
        v = tl.load(V + ptrs)
    p = tl.math.exp2(tl.dot(q, tl.trans(k)) * qk_scale - lse2[:, None])
    if MASKED:  # the causal diagonal and the end of the keys
        if CAUSAL:
            p = tl.where(offs_n[None, :] <= tl.minimum(offs_m + causal_off, SK - 1)[:, None], p, 0.0)
        else:
            p = tl.where(offs_n[None, :] < SK, p, 0.0)
    ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
    return dq + tl.dot(ds.to(k.dtype), k)


@triton.jit
def flash_attn_triton_bwd_dq(Q, K, V, dO, LSE, Delta, dQ, sm_scale, qk_scale, SQ, SK, causal_off,
                             GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """Grid (query blocks, batch * heads): dQ of BLOCK_M query rows."""
    bh = tl.program_id(1).to(tl.int64)
    start_m = tl.program_id(0) * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    in_seq = offs_m < SQ
    ptrs = bh * SQ * HEAD_DIM + offs_m[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    q = tl.load(Q + ptrs, mask=in_seq[:, None], other=0.0)
    do = tl.load(dO + ptrs, mask=in_seq[:, None], other=0.0)
    lse2 = tl.load(LSE + bh * SQ + offs_m, mask=in_seq, other=float("inf")) * LOG2_E_C
    delta = tl.load(Delta + bh * SQ + offs_m, mask=in_seq, other=0.0)
    kv_head = (bh // GROUP) * SK * HEAD_DIM  # GQA: GROUP query heads share one key/value head
    if CAUSAL:  # keys from full_hi on need the mask (the diagonal or the keys' end); from hi on, none is seen
        hi = tl.minimum(SK, start_m + BLOCK_M + causal_off)
        full_hi = tl.maximum(tl.minimum((start_m + causal_off + 1) // BLOCK_N, SK // BLOCK_N), 0) * BLOCK_N
    else:
        hi = SK
        full_hi = SK // BLOCK_N * BLOCK_N
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, full_hi, BLOCK_N):
        dq = _dq_key_block(dq, q, do, lse2, delta, K, V, kv_head, start_n, offs_m, SK, causal_off, qk_scale,
                           HEAD_DIM, BLOCK_N, CAUSAL, False)
    for start_n in range(full_hi, hi, BLOCK_N):
        dq = _dq_key_block(dq, q, do, lse2, delta, K, V, kv_head, start_n, offs_m, SK, causal_off, qk_scale,
                           HEAD_DIM, BLOCK_N, CAUSAL, True)
    tl.store(dQ + ptrs, (dq * sm_scale).to(dQ.dtype.element_ty), mask=in_seq[:, None])
