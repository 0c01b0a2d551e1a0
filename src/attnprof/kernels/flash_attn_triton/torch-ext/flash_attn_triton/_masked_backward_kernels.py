"""The masked forward's backward (masks.py: windows, causal either way, sequences by cu_seqlens): the dense
backward's three passes (_backward_kernels.py, whose block steps these share) over masks.py's block ranges."""

from __future__ import annotations

import triton
import triton.language as tl

from ._backward_kernels import LOG2_E_C, _dkdv_query_block, _dq_key_block
from .masks import key_range, query_range

# The masked backward (masks.py's forward: windows, causal either way, sequences by cu_seqlens). Tensors
# are [batch, tokens, heads, HEAD_DIM] with any strides but a contiguous last dimension; Q, dO and dQ
# share one set of strides, K, V, dK and dV another; LSE and Delta are [batch, query heads, tokens].
# A tile's blocks: those outside masks.py's ranges are never loaded, the edges are masked in registers,
# the interior runs plain.


@triton.jit
def flash_attn_triton_bwd_preprocess_tokens(Out, dOut, Delta, tokens, stride_b, stride_t, stride_h, HQ,
                                            HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """Grid (token blocks, batch * query heads): delta = rowsum(dO * O) in float32, for every token."""
    b = tl.program_id(1) // HQ
    h = tl.program_id(1) % HQ
    offs_t = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    in_rows = offs_t < tokens
    ptrs = (b.to(tl.int64) * stride_b + h * stride_h + offs_t[:, None].to(tl.int64) * stride_t
            + tl.arange(0, HEAD_DIM)[None, :])
    o = tl.load(Out + ptrs, mask=in_rows[:, None], other=0.0).to(tl.float32)
    do = tl.load(dOut + ptrs, mask=in_rows[:, None], other=0.0).to(tl.float32)
    tl.store(Delta + tl.program_id(1).to(tl.int64) * tokens + offs_t, tl.sum(o * do, 1), mask=in_rows)


@triton.jit
def _sequence(CuQ, CuK, seq):
    """(first query token, query count, first key token, key count) of one sequence."""
    q_start = tl.load(CuQ + seq)
    k_start = tl.load(CuK + seq)
    return q_start, tl.load(CuQ + seq + 1) - q_start, k_start, tl.load(CuK + seq + 1) - k_start


@triton.jit
def _dkdv_walk(dk, dv, k, v, Q, dO, LSE, Delta, q_rows, stride_qt, lse_rows, lo, full_lo, full_hi, hi, offs_n, sq,
               off, left, right, qk_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """Query blocks [lo, hi) of one query head against the program's keys, in one loop that branches per
    block: the masked step (both edges of the mask, rows past the sequence's end) outside [full_lo,
    full_hi), the plain one inside. One loop holds fewer registers than the forward's three runs (ptxas,
    sm_90, Triton 3.6: 80 bytes of spill against 664) and measured faster on the H200 (docs/kernel.md),
    although Triton does not software-pipeline a loop with the branch."""
    for start_m in range(lo, hi, BLOCK_M):
        if (start_m < full_lo) | (start_m >= full_hi):
            dk, dv = _dkdv_query_block(dk, dv, k, v, Q, dO, LSE, Delta, q_rows, stride_qt, q_rows, stride_qt, lse_rows,
                                       start_m, offs_n, sq, off + right, off - left, qk_scale, HEAD_DIM, BLOCK_M, True,
                                       False, True)
        else:
            dk, dv = _dkdv_query_block(dk, dv, k, v, Q, dO, LSE, Delta, q_rows, stride_qt, q_rows, stride_qt, lse_rows,
                                       start_m, offs_n, sq, off + right, off - left, qk_scale, HEAD_DIM, BLOCK_M, False,
                                       True, False)
    return dk, dv


@triton.jit
def flash_attn_triton_bwd_dkdv_masked(Q, K, V, dO, LSE, Delta, dK, dV, CuQ, CuK, sm_scale, qk_scale, stride_qb,
                                      stride_qt, stride_qh, stride_kb, stride_kt, stride_kh, HQ, lse_tokens, left,
                                      right, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                                      BLOCK_N: tl.constexpr, BOTTOM_RIGHT: tl.constexpr):
    """Grid (sequences * key/value heads, key blocks of the longest sequence, batch): dK and dV of BLOCK_N
    keys, summed over the GQA group, from the query blocks query_range gives."""
    seq = tl.program_id(0) // (HQ // GROUP)
    kv_head = (tl.program_id(0) % (HQ // GROUP)).to(tl.int64)
    b = tl.program_id(2).to(tl.int64)
    q_start, sq, k_start, sk = _sequence(CuQ, CuK, seq)
    start_n = tl.program_id(1) * BLOCK_N
    if start_n < sk:
        off = sk - sq if BOTTOM_RIGHT else 0
        offs_n = start_n + tl.arange(0, BLOCK_N)
        in_keys = offs_n < sk
        kv_ptrs = (b * stride_kb + k_start.to(tl.int64) * stride_kt + kv_head * stride_kh + offs_n[:, None] * stride_kt
                   + tl.arange(0, HEAD_DIM)[None, :])
        k = tl.load(K + kv_ptrs, mask=in_keys[:, None], other=0.0)
        v = tl.load(V + kv_ptrs, mask=in_keys[:, None], other=0.0)
        dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
        dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
        lo, full_lo, full_hi, hi = query_range(start_n, sq, sk, off, left, right, BLOCK_N, BLOCK_M)
        for g in range(GROUP):
            h = kv_head * GROUP + g
            q_rows = b * stride_qb + q_start.to(tl.int64) * stride_qt + h * stride_qh
            lse_rows = (b * HQ + h) * lse_tokens + q_start
            dk, dv = _dkdv_walk(dk, dv, k, v, Q, dO, LSE, Delta, q_rows, stride_qt, lse_rows, lo, full_lo, full_hi,
                                hi, offs_n, sq, off, left, right, qk_scale, HEAD_DIM, BLOCK_M)
        tl.store(dV + kv_ptrs, dv.to(dV.dtype.element_ty), mask=in_keys[:, None])
        tl.store(dK + kv_ptrs, (dk * sm_scale).to(dK.dtype.element_ty), mask=in_keys[:, None])


@triton.jit
def _dq_run(dq, q, do, lse2, delta, K, V, kv_rows, stride_kt, lo, hi, offs_m, sk, off, left, right, qk_scale,
            HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr):
    """Key blocks [lo, hi) against the program's rows; MASKED: the mask's edges and the keys' end."""
    for start_n in range(lo, hi, BLOCK_N):
        dq = _dq_key_block(dq, q, do, lse2, delta, K, V, kv_rows, stride_kt, kv_rows, stride_kt, start_n, offs_m, sk,
                           off + right, off - left, qk_scale, HEAD_DIM, BLOCK_N, True, MASKED, True)
    return dq


@triton.jit
def flash_attn_triton_bwd_dq_masked(Q, K, V, dO, LSE, Delta, dQ, CuQ, CuK, sm_scale, qk_scale, stride_qb, stride_qt,
                                    stride_qh, stride_kb, stride_kt, stride_kh, HQ, lse_tokens, left, right,
                                    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                                    BLOCK_N: tl.constexpr, BOTTOM_RIGHT: tl.constexpr):
    """Grid (sequences * query heads, query blocks of the longest sequence, batch): dQ of BLOCK_M rows
    from the key blocks key_range gives (the forward's), the last row blocks first."""
    seq = tl.program_id(0) // HQ
    h = (tl.program_id(0) % HQ).to(tl.int64)
    b = tl.program_id(2).to(tl.int64)
    q_start, sq, k_start, sk = _sequence(CuQ, CuK, seq)
    start_m = (tl.num_programs(1) - 1 - tl.program_id(1)) * BLOCK_M
    if start_m < sq:
        off = sk - sq if BOTTOM_RIGHT else 0
        offs_m = start_m + tl.arange(0, BLOCK_M)
        in_seq = offs_m < sq
        ptrs = (b * stride_qb + q_start.to(tl.int64) * stride_qt + h * stride_qh + offs_m[:, None] * stride_qt
                + tl.arange(0, HEAD_DIM)[None, :])
        q = tl.load(Q + ptrs, mask=in_seq[:, None], other=0.0)
        do = tl.load(dO + ptrs, mask=in_seq[:, None], other=0.0)
        lse_rows = (b * HQ + h) * lse_tokens + q_start + offs_m
        lse2 = tl.load(LSE + lse_rows, mask=in_seq, other=float("inf")) * LOG2_E_C
        delta = tl.load(Delta + lse_rows, mask=in_seq, other=0.0)
        kv_rows = b * stride_kb + k_start.to(tl.int64) * stride_kt + (h // GROUP) * stride_kh
        lo, full_lo, full_hi, hi = key_range(start_m, sq, sk, off, left, right, BLOCK_M, BLOCK_N)
        dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
        dq = _dq_run(dq, q, do, lse2, delta, K, V, kv_rows, stride_kt, lo, tl.minimum(full_lo, hi), offs_m, sk, off,
                     left, right, qk_scale, HEAD_DIM, BLOCK_N, True)
        dq = _dq_run(dq, q, do, lse2, delta, K, V, kv_rows, stride_kt, full_lo, full_hi, offs_m, sk, off, left, right,
                     qk_scale, HEAD_DIM, BLOCK_N, False)
        dq = _dq_run(dq, q, do, lse2, delta, K, V, kv_rows, stride_kt, tl.maximum(full_lo, full_hi), hi, offs_m, sk,
                     off, left, right, qk_scale, HEAD_DIM, BLOCK_N, True)
        tl.store(dQ + ptrs, (dq * sm_scale).to(dQ.dtype.element_ty), mask=in_seq[:, None])
