"""The masked forward's backward (masks.py: windows, causal either way, sequences by cu_seqlens): the dense
backward's dQ and dK/dV passes (_backward_kernels.py, whose block steps these share) over masks.py's block
ranges, with the preprocess's delta computed in the dQ pass, which runs first."""

from __future__ import annotations

import triton
import triton.language as tl

from .._head_tiles import load_parts, part_offsets, store_parts, zero_parts
from ..masks import key_range, query_range
from ._backward_atomic_kernels import add_dq_share, dq_descriptors
from ._backward_kernels import LOG2_E_C, _dkdv_query_block, _dq_key_block, _head_start, _rows

# The masked backward (masks.py's forward: windows, causal either way, sequences by cu_seqlens). Tensors
# are [batch, tokens, heads, HEAD_DIM], each read or written through its own matrix view (_tma_views.py, of
# its [batch, heads, tokens, HEAD_DIM] transpose: token t of head (b, h) at matrix row b * row_b + h * row_h
# + t); a sequence's start is 64-bit, offsets inside it 32-bit; LSE and Delta are [batch, query heads, tokens].
# A tile's blocks: those outside masks.py's ranges are never loaded, the edges are masked in registers,
# the interior runs plain.


@triton.jit
def _sequence(CuQ, CuK, seq):
    """(first query token, query count, first key token, key count) of one sequence."""
    q_start = tl.load(CuQ + seq)
    k_start = tl.load(CuK + seq)
    return q_start, tl.load(CuQ + seq + 1) - q_start, k_start, tl.load(CuK + seq + 1) - k_start


@triton.jit
def _dkdv_walk(dk, dk_second, dv, k, k_second, v, Q, dO, LSE, Delta, q_rows, q_stride, do_rows, do_stride, lse_rows, lo,
               full_lo, full_hi, hi, offs_n, sq, off, left, right, qk_scale, cap_scale, HEAD_DIM: tl.constexpr,
               HEAD_DIM_QK: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_M: tl.constexpr, SOFTCAP: tl.constexpr,
               dQacc=None, dq_desc=None, dq_second_desc=None, ATOMIC_DQ: tl.constexpr = False,
               DQ_TMA: tl.constexpr = False):
    """Query blocks [lo, hi) of one query head against the program's keys, in one loop that branches per
    block: the masked step (both edges of the mask, rows past the sequence's end) outside [full_lo,
    full_hi), the plain one inside. One loop holds fewer registers than the forward's three runs (ptxas,
    sm_90, Triton 3.6: 80 bytes of spill against 664) and measured faster on the H200 (docs/kernel.md),
    although Triton does not software-pipeline a loop with the branch; the masked step on every block, a
    loop without the branch that Triton pipelines, was 2% slower at window 256 (H200, docs/kernel.md).
    ATOMIC_DQ: also each block's share of dQ into dQacc (add_dq_share), whose rows are LSE's."""
    for start_m in range(lo, hi, BLOCK_M):
        if (start_m < full_lo) | (start_m >= full_hi):
            dk, dk_second, dv, ds_t = _dkdv_query_block(dk, dk_second, dv, k, k_second, v, Q, dO, LSE, Delta, q_rows,
                                                        q_stride, do_rows, do_stride, lse_rows, start_m, offs_n, sq,
                                                        off + right, off - left, qk_scale, HEAD_DIM, HEAD_DIM_QK,
                                                        HEAD_DIM_V, BLOCK_M, True, False, True, cap_scale, SOFTCAP)
        else:
            dk, dk_second, dv, ds_t = _dkdv_query_block(dk, dk_second, dv, k, k_second, v, Q, dO, LSE, Delta, q_rows,
                                                        q_stride, do_rows, do_stride, lse_rows, start_m, offs_n, sq,
                                                        off + right, off - left, qk_scale, HEAD_DIM, HEAD_DIM_QK,
                                                        HEAD_DIM_V, BLOCK_M, False, True, False, cap_scale, SOFTCAP)
        if ATOMIC_DQ:
            add_dq_share(dQacc, dq_desc, dq_second_desc, ds_t, k, k_second, lse_rows + start_m,
                          start_m + tl.arange(0, BLOCK_M), sq, HEAD_DIM, HEAD_DIM_QK, BLOCK_M, DQ_TMA)
    return dk, dk_second, dv


@triton.jit
def flash_attn_triton_bwd_dkdv_masked(Q, K, V, dO, LSE, Delta, dK, dV, CuQ, CuK, sm_scale, qk_scale, cap_scale, HQ,
                                      lse_tokens,
                                      left, right, q_stride, q_row_b, q_row_h, q_col_h, k_stride, k_row_b, k_row_h,
                                      k_col_h, v_stride, v_row_b, v_row_h, v_col_h, do_stride, do_row_b, do_row_h,
                                      do_col_h, dk_stride, dk_row_b, dk_row_h, dk_col_h, dv_stride, dv_row_b,
                                      dv_row_h, dv_col_h, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
                                      HEAD_DIM_QK: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_M: tl.constexpr,
                                      BLOCK_N: tl.constexpr, BOTTOM_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
                                      dQacc=None, ATOMIC_DQ: tl.constexpr = False, DQ_TMA: tl.constexpr = False):
    """Grid (sequences * key/value heads, key blocks of the longest sequence, batch): dK and dV of BLOCK_N
    keys, summed over the GQA group, from the query blocks query_range gives; it runs after the dQ pass,
    which stores every row's delta. SOFTCAP: the forward's soft-capped scores (masks.score_scales).
    ATOMIC_DQ: the single pass (masked_backward.py), after a preprocess that stores delta: each block's share of dQ
    is added into dQacc (float32 [batch, query heads, tokens, HEAD_DIM_QK], LSE's rows), through TMA reduces with
    DQ_TMA (sm_90), and no dQ pass runs."""
    seq = tl.program_id(0) // (HQ // GROUP)
    kv_head = (tl.program_id(0) % (HQ // GROUP)).to(tl.int64)
    b = tl.program_id(2).to(tl.int64)
    q_start, sq, k_start, sk = _sequence(CuQ, CuK, seq)
    start_n = tl.program_id(1) * BLOCK_N
    if start_n < sk:
        off = sk - sq if BOTTOM_RIGHT else 0
        offs_n = start_n + tl.arange(0, BLOCK_N)
        in_keys = offs_n < sk
        k_first = k_start.to(tl.int64)  # a new name: a branch may not change a variable's type
        k_rows = _head_start(b, kv_head, k_stride, k_row_b, k_row_h, k_col_h) + k_first * k_stride
        k_ptrs, k_second_ptrs = part_offsets(k_rows, offs_n, k_stride, HEAD_DIM, HEAD_DIM_QK)
        k, k_second = load_parts(K, k_ptrs, k_second_ptrs, in_keys, HEAD_DIM, HEAD_DIM_QK, False)
        v = tl.load(V + _rows(_head_start(b, kv_head, v_stride, v_row_b, v_row_h, v_col_h) + k_first * v_stride,
                              offs_n, v_stride, HEAD_DIM_V), mask=in_keys[:, None], other=0.0)
        dk, dk_second = zero_parts(BLOCK_N, HEAD_DIM, HEAD_DIM_QK)
        dv = tl.zeros([BLOCK_N, HEAD_DIM_V], dtype=tl.float32)
        lo, full_lo, full_hi, hi = query_range(start_n, sq, sk, off, left, right, BLOCK_N, BLOCK_M)
        dq_desc = dQacc  # the two passes' (None): a jit function returns no None, so dq_descriptors is not called
        dq_second_desc = dQacc
        if ATOMIC_DQ:  # with DQ_TMA, descriptors over every row of dQacc
            dq_desc, dq_second_desc = dq_descriptors(dQacc, tl.num_programs(2) * HQ * lse_tokens, BLOCK_M, HEAD_DIM,
                                                     HEAD_DIM_QK, DQ_TMA)
        for g in range(GROUP):
            h = kv_head * GROUP + g
            q_rows = _head_start(b, h, q_stride, q_row_b, q_row_h, q_col_h) + q_start.to(tl.int64) * q_stride
            do_rows = _head_start(b, h, do_stride, do_row_b, do_row_h, do_col_h) + q_start.to(tl.int64) * do_stride
            lse_rows = (b * HQ + h) * lse_tokens + q_start
            dk, dk_second, dv = _dkdv_walk(dk, dk_second, dv, k, k_second, v, Q, dO, LSE, Delta, q_rows, q_stride,
                                           do_rows, do_stride, lse_rows, lo, full_lo, full_hi, hi, offs_n, sq, off,
                                           left, right, qk_scale, cap_scale, HEAD_DIM, HEAD_DIM_QK, HEAD_DIM_V, BLOCK_M,
                                           SOFTCAP, dQacc, dq_desc, dq_second_desc, ATOMIC_DQ, DQ_TMA)
        dv_rows = _head_start(b, kv_head, dv_stride, dv_row_b, dv_row_h, dv_col_h) + k_first * dv_stride
        dk_rows = _head_start(b, kv_head, dk_stride, dk_row_b, dk_row_h, dk_col_h) + k_first * dk_stride
        tl.store(dV + _rows(dv_rows, offs_n, dv_stride, HEAD_DIM_V), dv.to(dV.dtype.element_ty),
                 mask=in_keys[:, None])
        dk_ptrs, dk_second_ptrs = part_offsets(dk_rows, offs_n, dk_stride, HEAD_DIM, HEAD_DIM_QK)
        store_parts(dK, dk_ptrs, dk_second_ptrs, dk, dk_second, sm_scale, in_keys, HEAD_DIM, HEAD_DIM_QK)


@triton.jit
def _dq_run(dq, dq_second, q, q_second, do, lse2, delta, k_head, k_stride, v_head, v_step, lo, hi, offs_m, sk, off,
            left, right, qk_scale, cap_scale, HEAD_DIM: tl.constexpr, HEAD_DIM_QK: tl.constexpr,
            HEAD_DIM_V: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, SOFTCAP: tl.constexpr):
    """Key blocks [lo, hi) against the program's rows (k_head, v_head: the sequence's first key in K and V);
    MASKED: the mask's edges and the keys' end."""
    for start_n in range(lo, hi, BLOCK_N):
        dq, dq_second = _dq_key_block(dq, dq_second, q, q_second, do, lse2, delta, k_head, v_head, 0, k_stride, 0,
                                      v_step, start_n, offs_m, sk, off + right, off - left, qk_scale, HEAD_DIM,
                                      HEAD_DIM_QK, HEAD_DIM_V, BLOCK_N, True, MASKED, True, cap_scale, SOFTCAP)
    return dq, dq_second


@triton.jit
def flash_attn_triton_bwd_dq_masked(Q, K, V, Out, dO, LSE, Delta, dQ, CuQ, CuK, sm_scale, qk_scale, cap_scale, HQ,
                                    lse_tokens,
                                    left, right, q_stride, q_row_b, q_row_h, q_col_h, k_stride, k_row_b, k_row_h,
                                    k_col_h, v_stride, v_row_b, v_row_h, v_col_h, o_stride, o_row_b, o_row_h, o_col_h,
                                    do_stride, do_row_b, do_row_h, do_col_h, dq_stride, dq_row_b, dq_row_h, dq_col_h,
                                    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_QK: tl.constexpr,
                                    HEAD_DIM_V: tl.constexpr, BLOCK_M: tl.constexpr,
                                    BLOCK_N: tl.constexpr, BOTTOM_RIGHT: tl.constexpr,
                                    KV_STRIDE_SHARED: tl.constexpr, SOFTCAP: tl.constexpr):
    """Grid (sequences * query heads, query blocks of the longest sequence, batch): dQ of BLOCK_M rows
    from the key blocks key_range gives (the forward's), the last row blocks first. KV_STRIDE_SHARED: as
    the dense dQ pass's (one offset tensor for K and V). The program computes its rows' delta = rowsum(dO *
    O) from the dO it loads anyway and stores it for the dK/dV pass, which runs second: no preprocess
    launch, a pass over dO less (H200, window 256: the backward 3% faster, docs/kernel.md). Three runs of
    key blocks (edge, plain, edge): one masked run over them all was 0.7% slower at window 256."""
    seq = tl.program_id(0) // HQ
    h = (tl.program_id(0) % HQ).to(tl.int64)
    b = tl.program_id(2).to(tl.int64)
    q_start, sq, k_start, sk = _sequence(CuQ, CuK, seq)
    start_m = (tl.num_programs(1) - 1 - tl.program_id(1)) * BLOCK_M
    if start_m < sq:
        off = sk - sq if BOTTOM_RIGHT else 0
        offs_m = start_m + tl.arange(0, BLOCK_M)
        in_seq = offs_m < sq
        q_first = q_start.to(tl.int64)
        q_rows = _head_start(b, h, q_stride, q_row_b, q_row_h, q_col_h) + q_first * q_stride
        q_ptrs, q_second_ptrs = part_offsets(q_rows, offs_m, q_stride, HEAD_DIM, HEAD_DIM_QK)
        q, q_second = load_parts(Q, q_ptrs, q_second_ptrs, in_seq, HEAD_DIM, HEAD_DIM_QK, False)
        do = tl.load(dO + _rows(_head_start(b, h, do_stride, do_row_b, do_row_h, do_col_h) + q_first * do_stride,
                                offs_m, do_stride, HEAD_DIM_V), mask=in_seq[:, None], other=0.0)
        lse_rows = (b * HQ + h) * lse_tokens + q_start + offs_m
        lse2 = tl.load(LSE + lse_rows, mask=in_seq, other=float("inf")) * LOG2_E_C
        o = tl.load(Out + _rows(_head_start(b, h, o_stride, o_row_b, o_row_h, o_col_h) + q_first * o_stride, offs_m,
                                o_stride, HEAD_DIM_V), mask=in_seq[:, None], other=0.0)
        delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
        tl.store(Delta + lse_rows, delta, mask=in_seq)
        k_first = k_start.to(tl.int64)  # a new name: a branch may not change a variable's type
        k_head = K + _head_start(b, h // GROUP, k_stride, k_row_b, k_row_h, k_col_h) + k_first * k_stride
        v_head = V + _head_start(b, h // GROUP, v_stride, v_row_b, v_row_h, v_col_h) + k_first * v_stride
        v_step = k_stride if KV_STRIDE_SHARED else v_stride
        lo, full_lo, full_hi, hi = key_range(start_m, sq, sk, off, left, right, BLOCK_M, BLOCK_N)
        dq, dq_second = zero_parts(BLOCK_M, HEAD_DIM, HEAD_DIM_QK)
        dq, dq_second = _dq_run(dq, dq_second, q, q_second, do, lse2, delta, k_head, k_stride, v_head, v_step, lo,
                                tl.minimum(full_lo, hi), offs_m, sk, off, left, right, qk_scale, cap_scale, HEAD_DIM,
                                HEAD_DIM_QK, HEAD_DIM_V, BLOCK_N, True, SOFTCAP)
        dq, dq_second = _dq_run(dq, dq_second, q, q_second, do, lse2, delta, k_head, k_stride, v_head, v_step, full_lo,
                                full_hi, offs_m, sk, off, left, right, qk_scale, cap_scale, HEAD_DIM, HEAD_DIM_QK,
                                HEAD_DIM_V, BLOCK_N, False, SOFTCAP)
        dq, dq_second = _dq_run(dq, dq_second, q, q_second, do, lse2, delta, k_head, k_stride, v_head, v_step,
                                tl.maximum(full_lo, full_hi), hi, offs_m, sk, off, left, right, qk_scale, cap_scale,
                                HEAD_DIM, HEAD_DIM_QK, HEAD_DIM_V, BLOCK_N, True, SOFTCAP)
        dq_rows = _head_start(b, h, dq_stride, dq_row_b, dq_row_h, dq_col_h) + q_first * dq_stride
        dq_ptrs, dq_second_ptrs = part_offsets(dq_rows, offs_m, dq_stride, HEAD_DIM, HEAD_DIM_QK)
        store_parts(dQ, dq_ptrs, dq_second_ptrs, dq, dq_second, sm_scale, in_seq, HEAD_DIM, HEAD_DIM_QK)
