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
Q, K, V, O, dO and the gradients are read and written where they lie, each through its matrix view
(_tma_views.py: row s of head (b, h) at matrix row b * row_b + h * row_h + s, column h * col_h, the
tensor's own row stride), so [B, H, S, D], [B, S, H, D] seen through a transpose and packed qkv slices
need no copy; a head's start is 64-bit, row offsets inside it fit in 32 bits.
The masked forward's backward (windows, either causal alignment, sequences by cu_seqlens) is the same
three passes over masks.py's block ranges (_masked_backward_kernels.py); the block steps here are shared.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .._head_tiles import dot_into_parts, dot_over_parts, load_parts, part_offsets, store_parts, zero_parts
from .._online_softmax import tanh
from ..forward._forward import _origin

LOG2_E_C = tl.constexpr(1.4426950408889634)


@triton.jit
def _head_start(b, h, stride, row_b, row_h, col_h):
    """Offset (64-bit, in elements) of row 0 of head h of batch b in a tensor seen as its matrix view."""
    row, col = _origin(b.to(tl.int64), h, row_b, row_h, col_h)
    return row * stride + col


@triton.jit
def _rows(start, offs, stride, HEAD_DIM: tl.constexpr):
    """Offsets of rows offs of a head that starts at start, [len(offs), HEAD_DIM]."""
    return start + offs[:, None] * stride + tl.arange(0, HEAD_DIM)[None, :]


@triton.jit
def flash_attn_triton_bwd_preprocess(Out, dOut, Delta, SQ, HEADS, o_stride, o_row_b, o_row_h, o_col_h, do_stride,
                                     do_row_b, do_row_h, do_col_h, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """Grid (query blocks, batch * heads): delta = rowsum(dO * O) in float32."""
    bh = tl.program_id(1)
    b, h = bh // HEADS, bh % HEADS
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    in_seq = offs_m < SQ
    o_ptrs = _rows(_head_start(b, h, o_stride, o_row_b, o_row_h, o_col_h), offs_m, o_stride, HEAD_DIM)
    do_ptrs = _rows(_head_start(b, h, do_stride, do_row_b, do_row_h, do_col_h), offs_m, do_stride, HEAD_DIM)
    o = tl.load(Out + o_ptrs, mask=in_seq[:, None], other=0.0).to(tl.float32)
    do = tl.load(dOut + do_ptrs, mask=in_seq[:, None], other=0.0).to(tl.float32)
    tl.store(Delta + bh.to(tl.int64) * SQ + offs_m, tl.sum(o * do, 1), mask=in_seq)


@triton.jit
def _dkdv_query_block(dk, dk_second, dv, k, k_second, v, Q, dO, LSE, Delta, q_rows, q_stride, do_rows, do_stride,
                      lse_rows, start_m, offs_n, SQ, causal_off, window_off, qk_scale, HEAD_DIM: tl.constexpr,
                      HEAD_DIM_QK: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_M: tl.constexpr,
                      CAUSAL_MASK: tl.constexpr, EVEN_M: tl.constexpr, WINDOW_MASK: tl.constexpr = False, cap_scale=0.0,
                      SOFTCAP: tl.constexpr = False):
    """One block of BLOCK_M query rows against the program's keys: P^T and dS^T are [BLOCK_N, BLOCK_M].
    Row i of the head is at q_rows + i * q_stride in Q, do_rows + i * do_stride in dO, lse_rows + i in
    LSE and Delta. SOFTCAP: the forward's soft-capped scores (_online_softmax.scores), whose derivative
    1 - tanh^2 scales dS. Q, K and dK come as their two parts (_head_tiles.py), dO and V whole. Returns dS^T too
    (in Q's dtype), which the masked single pass multiplies into dQ's share (_masked_backward_kernels.py)."""
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q_ptrs, q_second_ptrs = part_offsets(q_rows, offs_m, q_stride, HEAD_DIM, HEAD_DIM_QK)
    do_ptrs = _rows(do_rows, offs_m, do_stride, HEAD_DIM_V)
    if EVEN_M:
        q, q_second = load_parts(Q, q_ptrs, q_second_ptrs, None, HEAD_DIM, HEAD_DIM_QK, True)
        do = tl.load(dO + do_ptrs)
        lse = tl.load(LSE + lse_rows + offs_m)
        delta = tl.load(Delta + lse_rows + offs_m)
    else:  # rows past the end: LSE = +inf makes their P exactly 0
        in_seq = offs_m < SQ
        q, q_second = load_parts(Q, q_ptrs, q_second_ptrs, in_seq, HEAD_DIM, HEAD_DIM_QK, False)
        do = tl.load(dO + do_ptrs, mask=in_seq[:, None], other=0.0)
        lse = tl.load(LSE + lse_rows + offs_m, mask=in_seq, other=float("inf"))
        delta = tl.load(Delta + lse_rows + offs_m, mask=in_seq, other=0.0)
    qk_t = dot_over_parts(k, k_second, q, q_second, HEAD_DIM, HEAD_DIM_QK)
    if SOFTCAP:
        capped = tanh(qk_t * cap_scale)
        p_t = tl.math.exp2(capped * qk_scale - (lse * LOG2_E_C)[None, :])
    else:
        p_t = tl.math.exp2(qk_t * qk_scale - (lse * LOG2_E_C)[None, :])
    if CAUSAL_MASK:  # key j is visible to query i when j <= i + causal_off
        p_t = tl.where(offs_n[:, None] <= offs_m[None, :] + causal_off, p_t, 0.0)
    if WINDOW_MASK:  # and when j >= i + window_off (a window's left edge)
        p_t = tl.where(offs_n[:, None] >= offs_m[None, :] + window_off, p_t, 0.0)
    dv += tl.dot(p_t.to(do.dtype), do)
    dp_t = tl.dot(v, tl.trans(do))
    ds_t = p_t * (dp_t - delta[None, :])
    if SOFTCAP:
        ds_t = ds_t * (1.0 - capped * capped)
    ds_t = ds_t.to(q.dtype)
    dk, dk_second = dot_into_parts(dk, dk_second, ds_t, q, q_second, HEAD_DIM, HEAD_DIM_QK)
    return dk, dk_second, dv, ds_t


@triton.jit
def flash_attn_triton_bwd_dkdv(Q, K, V, dO, LSE, Delta, dK, dV, sm_scale, qk_scale, SQ, SK, causal_off, HEADS,
                               q_stride, q_row_b, q_row_h, q_col_h, k_stride, k_row_b, k_row_h, k_col_h,
                               v_stride, v_row_b, v_row_h, v_col_h, do_stride, do_row_b, do_row_h, do_col_h,
                               dk_stride, dk_row_b, dk_row_h, dk_col_h, dv_stride, dv_row_b, dv_row_h, dv_col_h,
                               GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_QK: tl.constexpr,
                               HEAD_DIM_V: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               CAUSAL: tl.constexpr, EVEN_M: tl.constexpr):
    """Grid (key blocks, batch * key/value heads): dK and dV of BLOCK_N keys, summed over the GQA group. Q, K and dK
    come as their two parts (_head_tiles.py; one HEAD_DIM wide at a power-of-2 HEAD_DIM_QK), V, dO and dV HEAD_DIM_V
    wide."""
    kv_bh = tl.program_id(1)
    b, kv_h = kv_bh // (HEADS // GROUP), kv_bh % (HEADS // GROUP)
    start_n = tl.program_id(0) * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    in_keys = offs_n < SK
    k_ptrs, k_second_ptrs = part_offsets(_head_start(b, kv_h, k_stride, k_row_b, k_row_h, k_col_h), offs_n,
                                         k_stride, HEAD_DIM, HEAD_DIM_QK)
    k, k_second = load_parts(K, k_ptrs, k_second_ptrs, in_keys, HEAD_DIM, HEAD_DIM_QK, False)
    v = tl.load(V + _rows(_head_start(b, kv_h, v_stride, v_row_b, v_row_h, v_col_h), offs_n, v_stride, HEAD_DIM_V),
                mask=in_keys[:, None], other=0.0)
    dk, dk_second = zero_parts(BLOCK_N, HEAD_DIM, HEAD_DIM_QK)
    dv = tl.zeros([BLOCK_N, HEAD_DIM_V], dtype=tl.float32)
    n_m = tl.cdiv(SQ, BLOCK_M)
    if CAUSAL:  # query blocks before lo see none of these keys; from full_lo on they see all of them
        lo = tl.maximum(start_n - causal_off, 0) // BLOCK_M
        full_lo = tl.minimum(tl.maximum(tl.cdiv(start_n + BLOCK_N - 1 - causal_off, BLOCK_M), lo), n_m)
    else:
        lo = 0
        full_lo = 0
    for g in range(GROUP):
        h = kv_h * GROUP + g
        q_rows = _head_start(b, h, q_stride, q_row_b, q_row_h, q_col_h)
        do_rows = _head_start(b, h, do_stride, do_row_b, do_row_h, do_col_h)
        lse_rows = (kv_bh.to(tl.int64) * GROUP + g) * SQ
        for m in range(lo, full_lo):
            dk, dk_second, dv, _ = _dkdv_query_block(dk, dk_second, dv, k, k_second, v, Q, dO, LSE, Delta, q_rows,
                                                     q_stride, do_rows, do_stride, lse_rows, m * BLOCK_M, offs_n, SQ,
                                                     causal_off, 0, qk_scale, HEAD_DIM, HEAD_DIM_QK, HEAD_DIM_V,
                                                     BLOCK_M, True, EVEN_M)
        for m in range(full_lo, n_m):
            dk, dk_second, dv, _ = _dkdv_query_block(dk, dk_second, dv, k, k_second, v, Q, dO, LSE, Delta, q_rows,
                                                     q_stride, do_rows, do_stride, lse_rows, m * BLOCK_M, offs_n, SQ,
                                                     causal_off, 0, qk_scale, HEAD_DIM, HEAD_DIM_QK, HEAD_DIM_V,
                                                     BLOCK_M, False, EVEN_M)
    dv_ptrs = _rows(_head_start(b, kv_h, dv_stride, dv_row_b, dv_row_h, dv_col_h), offs_n, dv_stride, HEAD_DIM_V)
    dk_ptrs, dk_second_ptrs = part_offsets(_head_start(b, kv_h, dk_stride, dk_row_b, dk_row_h, dk_col_h), offs_n,
                                            dk_stride, HEAD_DIM, HEAD_DIM_QK)
    tl.store(dV + dv_ptrs, dv.to(dV.dtype.element_ty), mask=in_keys[:, None])
    store_parts(dK, dk_ptrs, dk_second_ptrs, dk, dk_second, sm_scale, in_keys, HEAD_DIM, HEAD_DIM_QK)


@triton.jit
def _dq_key_block(dq, dq_second, q, q_second, do, lse2, delta, K, V, k_rows, k_stride, v_rows, v_stride, start_n,
                  offs_m, SK, causal_off, window_off, qk_scale, HEAD_DIM: tl.constexpr, HEAD_DIM_QK: tl.constexpr,
                  HEAD_DIM_V: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr,
                  WINDOW: tl.constexpr = False, cap_scale=0.0, SOFTCAP: tl.constexpr = False):
    """One block of BLOCK_N keys against the program's query rows; key j of the head is at k_rows + j *
    k_stride in K, v_rows + j * v_stride in V. WINDOW (with MASKED): also a lower bound, key j >= i + window_off.
    SOFTCAP: as _dkdv_query_block's."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k_ptrs, k_second_ptrs = part_offsets(k_rows, offs_n, k_stride, HEAD_DIM, HEAD_DIM_QK)
    v_ptrs = _rows(v_rows, offs_n, v_stride, HEAD_DIM_V)
    if MASKED:
        k, k_second = load_parts(K, k_ptrs, k_second_ptrs, offs_n < SK, HEAD_DIM, HEAD_DIM_QK, False)
        v = tl.load(V + v_ptrs, mask=(offs_n < SK)[:, None], other=0.0)
    else:
        k, k_second = load_parts(K, k_ptrs, k_second_ptrs, None, HEAD_DIM, HEAD_DIM_QK, True)
        v = tl.load(V + v_ptrs)
    qk = dot_over_parts(q, q_second, k, k_second, HEAD_DIM, HEAD_DIM_QK)
    if SOFTCAP:
        capped = tanh(qk * cap_scale)
        p = tl.math.exp2(capped * qk_scale - lse2[:, None])
    else:
        p = tl.math.exp2(qk * qk_scale - lse2[:, None])
    if MASKED:  # the causal diagonal and the end of the keys
        if CAUSAL:
            p = tl.where(offs_n[None, :] <= tl.minimum(offs_m + causal_off, SK - 1)[:, None], p, 0.0)
        else:
            p = tl.where(offs_n[None, :] < SK, p, 0.0)
        if WINDOW:
            p = tl.where(offs_n[None, :] >= (offs_m + window_off)[:, None], p, 0.0)
    ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
    if SOFTCAP:
        ds = ds * (1.0 - capped * capped)
    return dot_into_parts(dq, dq_second, ds.to(k.dtype), k, k_second, HEAD_DIM, HEAD_DIM_QK)


@triton.jit
def flash_attn_triton_bwd_dq(Q, K, V, dO, LSE, Delta, dQ, sm_scale, qk_scale, SQ, SK, causal_off, HEADS,
                             q_stride, q_row_b, q_row_h, q_col_h, k_stride, k_row_b, k_row_h, k_col_h,
                             v_stride, v_row_b, v_row_h, v_col_h, do_stride, do_row_b, do_row_h, do_col_h,
                             dq_stride, dq_row_b, dq_row_h, dq_col_h, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
                             HEAD_DIM_QK: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, KV_STRIDE_SHARED: tl.constexpr):
    """Grid (query blocks, batch * heads): dQ of BLOCK_M query rows. KV_STRIDE_SHARED: K's and V's rows are
    the same distance apart (every usual layout), so one offset tensor serves both loads of the key loop:
    ~70 fewer registers at head dim 128 (ptxas, sm_90; benchmarks/kernel/triton_compile_check.py --two-pass)."""
    bh = tl.program_id(1)
    b, h = bh // HEADS, bh % HEADS
    start_m = tl.program_id(0) * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    in_seq = offs_m < SQ
    q_ptrs, q_second_ptrs = part_offsets(_head_start(b, h, q_stride, q_row_b, q_row_h, q_col_h), offs_m, q_stride,
                                     HEAD_DIM, HEAD_DIM_QK)
    q, q_second = load_parts(Q, q_ptrs, q_second_ptrs, in_seq, HEAD_DIM, HEAD_DIM_QK, False)
    do = tl.load(dO + _rows(_head_start(b, h, do_stride, do_row_b, do_row_h, do_col_h), offs_m, do_stride, HEAD_DIM_V),
                 mask=in_seq[:, None], other=0.0)
    lse_rows = bh.to(tl.int64) * SQ + offs_m
    lse2 = tl.load(LSE + lse_rows, mask=in_seq, other=float("inf")) * LOG2_E_C
    delta = tl.load(Delta + lse_rows, mask=in_seq, other=0.0)
    k_head = K + _head_start(b, h // GROUP, k_stride, k_row_b, k_row_h, k_col_h)  # GQA: GROUP query heads share
    v_head = V + _head_start(b, h // GROUP, v_stride, v_row_b, v_row_h, v_col_h)  # one key/value head
    v_step = k_stride if KV_STRIDE_SHARED else v_stride
    if CAUSAL:  # keys from full_hi on need the mask (the diagonal or the keys' end); from hi on, none is seen
        hi = tl.minimum(SK, start_m + BLOCK_M + causal_off)
        full_hi = tl.maximum(tl.minimum((start_m + causal_off + 1) // BLOCK_N, SK // BLOCK_N), 0) * BLOCK_N
    else:
        hi = SK
        full_hi = SK // BLOCK_N * BLOCK_N
    dq, dq_second = zero_parts(BLOCK_M, HEAD_DIM, HEAD_DIM_QK)
    for start_n in range(0, full_hi, BLOCK_N):
        dq, dq_second = _dq_key_block(dq, dq_second, q, q_second, do, lse2, delta, k_head, v_head, 0, k_stride, 0,
                                      v_step, start_n, offs_m, SK, causal_off, 0, qk_scale, HEAD_DIM, HEAD_DIM_QK,
                                      HEAD_DIM_V, BLOCK_N, CAUSAL, False)
    for start_n in range(full_hi, hi, BLOCK_N):
        dq, dq_second = _dq_key_block(dq, dq_second, q, q_second, do, lse2, delta, k_head, v_head, 0, k_stride, 0,
                                      v_step, start_n, offs_m, SK, causal_off, 0, qk_scale, HEAD_DIM, HEAD_DIM_QK,
                                      HEAD_DIM_V, BLOCK_N, CAUSAL, True)
    dq_ptrs, dq_second_ptrs = part_offsets(_head_start(b, h, dq_stride, dq_row_b, dq_row_h, dq_col_h), offs_m,
                                            dq_stride, HEAD_DIM, HEAD_DIM_QK)
    store_parts(dQ, dq_ptrs, dq_second_ptrs, dq, dq_second, sm_scale, in_seq, HEAD_DIM, HEAD_DIM_QK)
