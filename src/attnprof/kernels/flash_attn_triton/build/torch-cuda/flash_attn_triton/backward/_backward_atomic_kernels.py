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
Tensors are contiguous [batch * heads, seq, HEAD_DIM]; row offsets inside a head fit in 32 bits.
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2_E_C = tl.constexpr(1.4426950408889634)


@triton.jit
def flash_attn_triton_bwd_delta_zero(Out, dOut, Delta, dQacc, ROWS, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    """Grid (row blocks over batch * heads * seq): delta = rowsum(dO * O) in float32, dQ_acc's rows zeroed."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    in_rows = rows < ROWS
    ptrs = rows[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    o = tl.load(Out + ptrs, mask=in_rows[:, None], other=0.0).to(tl.float32)
    do = tl.load(dOut + ptrs, mask=in_rows[:, None], other=0.0).to(tl.float32)
    tl.store(Delta + rows, tl.sum(o * do, 1), mask=in_rows)
    tl.store(dQacc + ptrs, tl.zeros([BLOCK, HEAD_DIM], dtype=tl.float32), mask=in_rows[:, None])


@triton.jit
def flash_attn_triton_bwd_dq_convert(dQacc, dQ, sm_scale, ROWS, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    """Grid (row blocks over batch * heads * seq): dQ = dQ_acc * scale in dQ's dtype."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    in_rows = rows < ROWS
    ptrs = rows[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    acc = tl.load(dQacc + ptrs, mask=in_rows[:, None], other=0.0)
    tl.store(dQ + ptrs, (acc * sm_scale).to(dQ.dtype.element_ty), mask=in_rows[:, None])


@triton.jit
def _query_rows(Q, dO, LSE, Delta, q_head, offs_m, SQ, HEAD_DIM: tl.constexpr, EVEN_M: tl.constexpr):
    """Q, dO, base-2 LSE and delta of one query block; rows past the end get LSE = +inf (P exactly 0)."""
    ptrs = q_head * HEAD_DIM + offs_m[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    if EVEN_M:
        q = tl.load(Q + ptrs)
        do = tl.load(dO + ptrs)
        lse2 = tl.load(LSE + q_head + offs_m) * LOG2_E_C
        delta = tl.load(Delta + q_head + offs_m)
    else:
        in_seq = offs_m < SQ
        q = tl.load(Q + ptrs, mask=in_seq[:, None], other=0.0)
        do = tl.load(dO + ptrs, mask=in_seq[:, None], other=0.0)
        lse2 = tl.load(LSE + q_head + offs_m, mask=in_seq, other=float("inf")) * LOG2_E_C
        delta = tl.load(Delta + q_head + offs_m, mask=in_seq, other=0.0)
    return q, do, lse2, delta, ptrs


@triton.jit
def flash_attn_triton_bwd_single(Q, K, V, dO, LSE, Delta, dQacc, dK, dV, sm_scale, qk_scale, SQ, SK, causal_off,
                                 ROWS, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                                 BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, EVEN_M: tl.constexpr,
                                 DQ_TMA: tl.constexpr):
    """Grid (key blocks, batch * key/value heads): dK, dV of BLOCK_N keys (summed over the GQA group), and
    their share of dQ added into dQacc ([ROWS = batch * heads * SQ, HEAD_DIM]).

    DQ_TMA (sm_90): the share goes through shared memory to one TMA reduce-add per block
    (cp.reduce.async.bulk.tensor, FlashAttention-3's way); otherwise, and under the interpreter, through
    element-wise atomics, whose 64-bit address per element costs registers (Triton 3.6 emits a returning
    atom.global per element: 1,216 bytes of spills at BLOCK_N=128, D=128 against 624 with TMA)."""
    kv_bh = tl.program_id(1).to(tl.int64)
    start_n = tl.program_id(0) * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    kv_ptrs = kv_bh * SK * HEAD_DIM + offs_n[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    in_keys = offs_n < SK
    k = tl.load(K + kv_ptrs, mask=in_keys[:, None], other=0.0)  # keys past the end are 0: they add 0 to dQ
    v = tl.load(V + kv_ptrs, mask=in_keys[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    lo = tl.maximum(start_n - causal_off, 0) // BLOCK_M if CAUSAL else 0  # causal: blocks before lo see no key here
    per_head = tl.cdiv(SQ, BLOCK_M) - lo
    if DQ_TMA:
        dq_desc = tl.make_tensor_descriptor(dQacc, shape=[ROWS, HEAD_DIM], strides=[HEAD_DIM, 1],
                                            block_shape=[BLOCK_M, HEAD_DIM])
    for step in range(GROUP * per_head):
        g = step // per_head
        start_m = (lo + step - g * per_head) * BLOCK_M
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q_head = (kv_bh * GROUP + g) * SQ
        q, do, lse2, delta, q_ptrs = _query_rows(Q, dO, LSE, Delta, q_head, offs_m, SQ, HEAD_DIM, EVEN_M)
        p_t = tl.math.exp2(tl.dot(k, tl.trans(q)) * qk_scale - lse2[None, :])
        if CAUSAL:  # key j is visible to query i when j <= i + causal_off
            p_t = tl.where(offs_n[:, None] <= offs_m[None, :] + causal_off, p_t, 0.0)
        dv += tl.dot(p_t.to(do.dtype), do)
        ds_t = (p_t * (tl.dot(v, tl.trans(do)) - delta[None, :])).to(q.dtype)
        dk += tl.dot(ds_t, q)
        dq = tl.dot(tl.trans(ds_t), k)
        if DQ_TMA:  # rows past a head's end add exact zeros (P = 0 there) into the next head's first rows
            dq_desc.atomic_add([(q_head + start_m).to(tl.int32), 0], dq)
        elif EVEN_M:
            tl.atomic_add(dQacc + q_ptrs, dq, sem="relaxed")
        else:
            tl.atomic_add(dQacc + q_ptrs, dq, mask=(offs_m < SQ)[:, None], sem="relaxed")
    tl.store(dV + kv_ptrs, dv.to(dV.dtype.element_ty), mask=in_keys[:, None])
    tl.store(dK + kv_ptrs, (dk * sm_scale).to(dK.dtype.element_ty), mask=in_keys[:, None])
