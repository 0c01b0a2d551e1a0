"""The single-pass backward's kernels (FlashAttention-2/3's way): dQ accumulated with float32 atomics.

The two-pass backward (_backward_kernels.py) recomputes Q K^T and dO V^T in a dQ pass of its own: 7 block
products per (query block, key block) pair. Here one pass does 5: each program owns BLOCK_N keys of one
key/value head, keeps K and V in registers, and walks every (query head of its GQA group, query block)
that can see them in ONE flattened loop (Triton warp-specialises only a kernel with a single loop, though
Triton 3.6 left this one unspecialised: no setmaxnreg, the same time on the H200):
    P^T = exp(K Q^T * scale - LSE),  dV += P^T dO,  dS^T = P^T * (V dO^T - delta),  dK += dS^T Q,
    dQ_acc[rows] += dS K          (float32 atomics: several key blocks add into one query row)
The products are those of _backward_kernels._dkdv_query_block plus dS K; the causal mask is applied to every
block of the loop (a block below the diagonal keeps all of it), since one loop cannot have a masked and
an unmasked body. The float32 accumulator is zeroed by the preprocess (which also computes delta) and
turned into dQ * scale in the query's dtype by the postprocess: three kernels, no memset.
Tensors are contiguous [batch * heads, seq, head dim]; row offsets inside a head fit in 32 bits. Q, K, dK and
dQ are HEAD_DIM_QK wide, held as two parts where that is not a power of 2 (_head_tiles.py: 192 as 128 + 64),
V, O, dO and dV HEAD_DIM_V wide; at 64, 128 and 256 (q, k, v alike) the second part is the first.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .._head_tiles import dot_into_parts, dot_over_parts, load_parts, part_offsets, store_parts, tile_mask, zero_parts

LOG2_E_C = tl.constexpr(1.4426950408889634)


@triton.jit
def flash_attn_triton_bwd_delta_zero(Out, dOut, Delta, dQacc, ROWS, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
                                     HEAD_DIM_QK: tl.constexpr, HEAD_DIM_V: tl.constexpr):
    """Grid (row blocks over batch * heads * seq): delta = rowsum(dO * O) in float32, dQ_acc's rows zeroed
    (HEAD_DIM: q/k's head dim rounded up to a power of 2, the columns past HEAD_DIM_QK masked)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    in_rows = rows < ROWS
    ptrs = rows[:, None] * HEAD_DIM_V + tl.arange(0, HEAD_DIM_V)[None, :]
    o = tl.load(Out + ptrs, mask=in_rows[:, None], other=0.0).to(tl.float32)
    do = tl.load(dOut + ptrs, mask=in_rows[:, None], other=0.0).to(tl.float32)
    tl.store(Delta + rows, tl.sum(o * do, 1), mask=in_rows)
    dq_ptrs = rows[:, None] * HEAD_DIM_QK + tl.arange(0, HEAD_DIM)[None, :]
    tl.store(dQacc + dq_ptrs, tl.zeros([BLOCK, HEAD_DIM], dtype=tl.float32), mask=tile_mask(in_rows, HEAD_DIM,
                                                                                            HEAD_DIM_QK))


@triton.jit
def flash_attn_triton_bwd_dq_convert(dQacc, dQ, sm_scale, ROWS, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
                                     HEAD_DIM_QK: tl.constexpr):
    """Grid (row blocks over batch * heads * seq): dQ = dQ_acc * scale in dQ's dtype."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = tile_mask(rows < ROWS, HEAD_DIM, HEAD_DIM_QK)
    ptrs = rows[:, None] * HEAD_DIM_QK + tl.arange(0, HEAD_DIM)[None, :]
    acc = tl.load(dQacc + ptrs, mask=mask, other=0.0)
    tl.store(dQ + ptrs, (acc * sm_scale).to(dQ.dtype.element_ty), mask=mask)


@triton.jit
def _query_rows(Q, dO, LSE, Delta, q_head, offs_m, SQ, HEAD_DIM: tl.constexpr, HEAD_DIM_QK: tl.constexpr,
                HEAD_DIM_V: tl.constexpr, EVEN_M: tl.constexpr):
    """Q (its two parts), dO, base-2 LSE and delta of one query block; rows past the end get LSE = +inf (P exactly
    0)."""
    q_ptrs, q_second_ptrs = part_offsets(q_head * HEAD_DIM_QK, offs_m, HEAD_DIM_QK, HEAD_DIM, HEAD_DIM_QK)
    do_ptrs = q_head * HEAD_DIM_V + offs_m[:, None] * HEAD_DIM_V + tl.arange(0, HEAD_DIM_V)[None, :]
    if EVEN_M:
        q, q_second = load_parts(Q, q_ptrs, q_second_ptrs, None, HEAD_DIM, HEAD_DIM_QK, True)
        do = tl.load(dO + do_ptrs)
        lse2 = tl.load(LSE + q_head + offs_m) * LOG2_E_C
        delta = tl.load(Delta + q_head + offs_m)
    else:
        in_seq = offs_m < SQ
        q, q_second = load_parts(Q, q_ptrs, q_second_ptrs, in_seq, HEAD_DIM, HEAD_DIM_QK, False)
        do = tl.load(dO + do_ptrs, mask=in_seq[:, None], other=0.0)
        lse2 = tl.load(LSE + q_head + offs_m, mask=in_seq, other=float("inf")) * LOG2_E_C
        delta = tl.load(Delta + q_head + offs_m, mask=in_seq, other=0.0)
    return q, q_second, do, lse2, delta


@triton.jit
def dq_descriptors(dQacc, rows, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_QK: tl.constexpr,
                   DQ_TMA: tl.constexpr):
    """With DQ_TMA, TMA descriptors over dQacc ([rows, HEAD_DIM_QK] float32) for [BLOCK_M, part] boxes of the head's
    two parts (one, twice, at a power-of-2 width); without, dQacc twice (add_dq_share's atomics take pointers)."""
    first = dQacc
    second = dQacc
    if DQ_TMA:
        first = tl.make_tensor_descriptor(dQacc, shape=[rows, HEAD_DIM_QK], strides=[HEAD_DIM_QK, 1],
                                          block_shape=[BLOCK_M, HEAD_DIM if HEAD_DIM_QK == HEAD_DIM else HEAD_DIM // 2])
        second = first
        if HEAD_DIM_QK < HEAD_DIM:
            second = tl.make_tensor_descriptor(dQacc, shape=[rows, HEAD_DIM_QK], strides=[HEAD_DIM_QK, 1],
                                               block_shape=[BLOCK_M, HEAD_DIM_QK - HEAD_DIM // 2])
    return first, second


@triton.jit
def add_dq_share(dQacc, dq_desc, dq_second_desc, ds_t, k, k_second, dq_row, offs_m, seq_len, HEAD_DIM: tl.constexpr,
                 HEAD_DIM_QK: tl.constexpr, BLOCK_M: tl.constexpr, DQ_TMA: tl.constexpr):
    """dQacc's rows dq_row + i (i < BLOCK_M; query offs_m[i] of a sequence of seq_len) += this key block's dS K, part
    by part: one TMA reduce a part with DQ_TMA (rows past the sequence's end add exact zeros, P = 0 there, into the
    rows after it), else element-wise atomics on the sequence's rows."""
    dq = tl.dot(tl.trans(ds_t), k)
    dq_second = tl.dot(tl.trans(ds_t), k_second) if HEAD_DIM_QK < HEAD_DIM else dq
    if DQ_TMA:
        dq_desc.atomic_add([dq_row.to(tl.int32), 0], dq)
        if HEAD_DIM_QK < HEAD_DIM:
            dq_second_desc.atomic_add([dq_row.to(tl.int32), HEAD_DIM // 2], dq_second)
    else:
        rows_ok = (offs_m < seq_len)[:, None]
        ptrs, second_ptrs = part_offsets(dq_row * HEAD_DIM_QK, tl.arange(0, BLOCK_M), HEAD_DIM_QK, HEAD_DIM,
                                         HEAD_DIM_QK)
        tl.atomic_add(dQacc + ptrs, dq, mask=rows_ok, sem="relaxed")
        if HEAD_DIM_QK < HEAD_DIM:
            tl.atomic_add(dQacc + second_ptrs, dq_second, mask=rows_ok, sem="relaxed")


@triton.jit
def flash_attn_triton_bwd_single(Q, K, V, dO, LSE, Delta, dQacc, dK, dV, sm_scale, qk_scale, SQ, SK, causal_off,
                                 ROWS, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                                 BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, EVEN_M: tl.constexpr,
                                 DQ_TMA: tl.constexpr, HEAD_DIM_QK: tl.constexpr, HEAD_DIM_V: tl.constexpr):
    """Grid (key blocks, batch * key/value heads): dK, dV of BLOCK_N keys (summed over the GQA group), and
    their share of dQ added into dQacc ([ROWS = batch * heads * SQ, HEAD_DIM_QK]).

    DQ_TMA (sm_90): the share goes through shared memory to one TMA reduce-add per block and part
    (cp.reduce.async.bulk.tensor, FlashAttention-3's way); otherwise, and under the interpreter, through
    element-wise atomics, whose 64-bit address per element costs registers (Triton 3.6 emits a returning
    atom.global per element: 1,216 bytes of spills at BLOCK_N=128, D=128 against 624 with TMA)."""
    kv_bh = tl.program_id(1).to(tl.int64)
    start_n = tl.program_id(0) * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k_ptrs, k_second_ptrs = part_offsets(kv_bh * SK * HEAD_DIM_QK, offs_n, HEAD_DIM_QK, HEAD_DIM, HEAD_DIM_QK)
    v_ptrs = kv_bh * SK * HEAD_DIM_V + offs_n[:, None] * HEAD_DIM_V + tl.arange(0, HEAD_DIM_V)[None, :]
    in_keys = offs_n < SK
    # keys past the end are 0: they add 0 to dQ
    k, k_second = load_parts(K, k_ptrs, k_second_ptrs, in_keys, HEAD_DIM, HEAD_DIM_QK, False)
    v = tl.load(V + v_ptrs, mask=in_keys[:, None], other=0.0)
    dk, dk_second = zero_parts(BLOCK_N, HEAD_DIM, HEAD_DIM_QK)
    dv = tl.zeros([BLOCK_N, HEAD_DIM_V], dtype=tl.float32)
    lo = tl.maximum(start_n - causal_off, 0) // BLOCK_M if CAUSAL else 0  # causal: blocks before lo see no key here
    per_head = tl.cdiv(SQ, BLOCK_M) - lo
    dq_desc, dq_second_desc = dq_descriptors(dQacc, ROWS, BLOCK_M, HEAD_DIM, HEAD_DIM_QK, DQ_TMA)
    for step in range(GROUP * per_head):
        g = step // per_head
        start_m = (lo + step - g * per_head) * BLOCK_M
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q_head = (kv_bh * GROUP + g) * SQ
        q, q_second, do, lse2, delta = _query_rows(Q, dO, LSE, Delta, q_head, offs_m, SQ, HEAD_DIM, HEAD_DIM_QK,
                                                   HEAD_DIM_V, EVEN_M)
        p_t = tl.math.exp2(dot_over_parts(k, k_second, q, q_second, HEAD_DIM, HEAD_DIM_QK) * qk_scale
                           - lse2[None, :])
        if CAUSAL:  # key j is visible to query i when j <= i + causal_off
            p_t = tl.where(offs_n[:, None] <= offs_m[None, :] + causal_off, p_t, 0.0)
        dv += tl.dot(p_t.to(do.dtype), do)
        ds_t = (p_t * (tl.dot(v, tl.trans(do)) - delta[None, :])).to(q.dtype)
        dk, dk_second = dot_into_parts(dk, dk_second, ds_t, q, q_second, HEAD_DIM, HEAD_DIM_QK)
        # rows past a head's end add exact zeros into the next head's first rows
        add_dq_share(dQacc, dq_desc, dq_second_desc, ds_t, k, k_second, q_head + start_m, offs_m, SQ, HEAD_DIM,
                     HEAD_DIM_QK, BLOCK_M, DQ_TMA)
    tl.store(dV + v_ptrs, dv.to(dV.dtype.element_ty), mask=in_keys[:, None])
    store_parts(dK, k_ptrs, k_second_ptrs, dk, dk_second, sm_scale, in_keys, HEAD_DIM, HEAD_DIM_QK)
