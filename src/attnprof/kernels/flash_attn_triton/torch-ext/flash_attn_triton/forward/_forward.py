"""The forward kernel: one program computes softmax(Q K^T * scale) V for a block of BLOCK_M query rows.

FlashAttention-2's online softmax, written for Hopper (sm_90) in Triton 3.6:
- Q, K and V come in through TMA tensor descriptors over the caller's tensors where they lie, each seen
  as a 2-D matrix (_tma_views.py: [B, H, S, D] contiguous or [B, S, H, D] transposed, no copy), made
  on the device: warp specialisation splits the Q tile between two consumer warpgroups, and only a
  descriptor the compiler makes can follow that split (a host descriptor keeps its 128-row box and
  would write past a 64-row buffer);
- the key loop is software-pipelined (num_stages buffers of K and V in shared memory);
- with WARP_SPECIALIZE, Triton's Hopper warp specialisation turns the program into one producer
  warpgroup issuing the TMA loads and two consumer warpgroups (64 rows each) doing wgmma and the
  softmax, their registers rebalanced with setmaxnreg. Triton 3.6 specialises only a kernel whose key
  loop is a single loop, so that form masks every block (FUSED_LOOP); the plain form splits the loop
  into the unmasked blocks and the few diagonal / ragged ones;
- causal blocks above the diagonal are never visited, and tiles run longest-first (the last query
  block of a head first), so the short ones fill the tail of the launch;
- with PERSISTENT, a grid of one program per SM walks the tiles, so no program waits to be launched.
The output is written with plain masked stores, at the places of its own matrix view (the TMA store
would be split by the warp specialisation and would write past a ragged sequence end into the next head).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .._head_tiles import dot_over_parts, load_part_boxes, part_descriptors

LOG2_E = 1.4426950408889634
LN_2 = tl.constexpr(0.6931471805599453)  # a constexpr: jit code reads no plain globals


@triton.jit
def _scores(q, q_second, desc_k, desc_k_second, k_row, k_col, HEAD_DIM: tl.constexpr, HEAD_DIM_QK: tl.constexpr):
    """Q K^T for one block of keys starting at matrix row k_row. A q/k head dim that is not a power of 2 (192) comes
    as two boxes each, HEAD_DIM // 2 columns and the rest (_head_tiles.py): K goes from shared memory into the
    tensor cores as it came, with no padded columns to zero on its way through registers."""
    k, k_second = load_part_boxes(desc_k, desc_k_second, k_row, k_col, HEAD_DIM, HEAD_DIM_QK)
    return dot_over_parts(q, q_second, k, k_second, HEAD_DIM, HEAD_DIM_QK)


@triton.jit
def _key_block(acc, l_i, m_i, q, q_second, desc_k, desc_k_second, desc_v, k_row, k_col, v_row, v_col, start_n, offs_n,
               row_limit, qk_scale, MASKED: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_QK: tl.constexpr):
    """One BLOCK_N block of keys: scores, online-softmax update, and P @ V into the accumulator."""
    qk = _scores(q, q_second, desc_k, desc_k_second, k_row + start_n, k_col, HEAD_DIM, HEAD_DIM_QK)
    if MASKED:  # key j is kept for row i when j <= row_limit[i] (causal diagonal, sequence end)
        qk = tl.where((start_n + offs_n)[None, :] <= row_limit[:, None], qk, -float("inf"))
    # every row keeps key 0, so the first block visited makes m_i finite and exp2(-inf - m) = 0
    m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
    alpha = tl.math.exp2(m_i - m_ij)
    l_i = l_i * alpha + tl.sum(p, 1)
    v = desc_v.load([v_row + start_n, v_col])
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, l_i, m_ij


@triton.jit
def _origin(b, h, row_b, row_h, col_h):
    """(matrix row, column) of position 0 of (batch b, head h) in a tensor's matrix view (_tma_views.py)."""
    return b * row_b + h * row_h, h * col_h


@triton.jit
def _tile(desc_q, desc_q_second, desc_k, desc_k_second, desc_v, Out, LSE, tile, n_m, n_bh, SQ, SK, causal_off, qk_scale,
          HEADS, q_row_b, q_row_h, q_col_h, k_row_b, k_row_h, k_col_h, v_row_b, v_row_h, v_col_h, o_stride, o_row_b,
          o_row_h, o_col_h, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_QK: tl.constexpr,
          HEAD_DIM_V: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
          EVEN_N: tl.constexpr, FUSED_LOOP: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, HEAD_GROUP: tl.constexpr):
    group_start = tile // (n_m * HEAD_GROUP) * HEAD_GROUP
    heads_here = tl.minimum(HEAD_GROUP, n_bh - group_start)
    r = tile - group_start * n_m
    bh = group_start + r % heads_here
    start_m = (n_m - 1 - r // heads_here) * BLOCK_M  # longest query blocks of a group of heads first
    b = bh // HEADS
    h = bh % HEADS
    q_row, q_col = _origin(b, h, q_row_b, q_row_h, q_col_h)
    k_row, k_col = _origin(b, h // GROUP, k_row_b, k_row_h, k_col_h)  # GQA: GROUP query heads share one
    v_row, v_col = _origin(b, h // GROUP, v_row_b, v_row_h, v_col_h)  # key/value head
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    if CAUSAL:
        row_limit = tl.minimum(offs_m + causal_off, SK - 1)
        hi = tl.minimum(SK, start_m + BLOCK_M + causal_off)  # blocks past the diagonal are skipped
        full_hi = tl.minimum((start_m + causal_off + 1) // BLOCK_N, SK // BLOCK_N) * BLOCK_N
    else:
        row_limit = tl.zeros([BLOCK_M], dtype=tl.int32) + (SK - 1)
        hi = SK
        full_hi = SK // BLOCK_N * BLOCK_N
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_V], dtype=tl.float32)
    q, q_second = load_part_boxes(desc_q, desc_q_second, q_row + start_m, q_col, HEAD_DIM, HEAD_DIM_QK)
    if FUSED_LOOP:
        for start_n in tl.range(0, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
            acc, l_i, m_i = _key_block(acc, l_i, m_i, q, q_second, desc_k, desc_k_second, desc_v, k_row, k_col, v_row,
                                       v_col, start_n, offs_n, row_limit, qk_scale, CAUSAL or not EVEN_N, HEAD_DIM,
                                       HEAD_DIM_QK)
    else:
        for start_n in tl.range(0, full_hi, BLOCK_N):
            acc, l_i, m_i = _key_block(acc, l_i, m_i, q, q_second, desc_k, desc_k_second, desc_v, k_row, k_col, v_row,
                                       v_col, start_n, offs_n, row_limit, qk_scale, False, HEAD_DIM, HEAD_DIM_QK)
        for start_n in tl.range(full_hi, hi, BLOCK_N):
            acc, l_i, m_i = _key_block(acc, l_i, m_i, q, q_second, desc_k, desc_k_second, desc_v, k_row, k_col, v_row,
                                       v_col, start_n, offs_n, row_limit, qk_scale, True, HEAD_DIM, HEAD_DIM_QK)
    in_seq = offs_m < SQ
    tl.store(LSE + bh.to(tl.int64) * SQ + offs_m, (m_i + tl.math.log2(l_i)) * LN_2, mask=in_seq)  # natural log
    out = (acc / l_i[:, None]).to(Out.dtype.element_ty)
    o_row, o_col = _origin(b.to(tl.int64), h, o_row_b, o_row_h, o_col_h)  # a 64-bit base, 32-bit offsets in it
    o_ptrs = Out + (o_row * o_stride + o_col) + offs_m[:, None] * o_stride + tl.arange(0, HEAD_DIM_V)[None, :]
    tl.store(o_ptrs, out, mask=in_seq[:, None])


@triton.jit
def flash_attn_triton_fwd(Q, K, V, Out, LSE, qk_scale, n_bh, SQ, SK, causal_off, HEADS,
                          q_rows, q_cols, q_stride, q_row_b, q_row_h, q_col_h,
                          k_rows, k_cols, k_stride, k_row_b, k_row_h, k_col_h,
                          v_rows, v_cols, v_stride, v_row_b, v_row_h, v_col_h,
                          o_stride, o_row_b, o_row_h, o_col_h,
                          GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_QK: tl.constexpr,
                          HEAD_DIM_V: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          CAUSAL: tl.constexpr, EVEN_N: tl.constexpr,
                          FUSED_LOOP: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, PERSISTENT: tl.constexpr,
                          HEAD_GROUP: tl.constexpr):
    """Grid: one program per tile, or with PERSISTENT min(tiles, SMs) programs that stride the tiles.
    Q, K, V and Out are each read or written through their matrix view (_tma_views.py: rows, cols and the
    row stride of the matrix; row_b, row_h, col_h place a head in it). The name is what profilers show:
    distinct, so attnprof's kernel-name decoder can tell it apart. HEAD_DIM: HEAD_DIM_QK rounded up to a power of 2
    (192: 256, whose Q and K come as boxes of 128 and 64 columns, _scores); HEAD_DIM_V: V's and the output's."""
    desc_q, desc_q_second = part_descriptors(Q, q_rows, q_cols, q_stride, BLOCK_M, HEAD_DIM, HEAD_DIM_QK)  # _scores
    desc_k, desc_k_second = part_descriptors(K, k_rows, k_cols, k_stride, BLOCK_N, HEAD_DIM, HEAD_DIM_QK)
    desc_v = tl.make_tensor_descriptor(V, shape=[v_rows, v_cols], strides=[v_stride, 1],
                                       block_shape=[BLOCK_N, HEAD_DIM_V])
    n_m = tl.cdiv(SQ, BLOCK_M)
    if PERSISTENT:
        for tile in tl.range(tl.program_id(0), n_m * n_bh, tl.num_programs(0)):
            _tile(desc_q, desc_q_second, desc_k, desc_k_second, desc_v, Out, LSE, tile, n_m, n_bh, SQ, SK, causal_off,
                  qk_scale, HEADS,
                  q_row_b, q_row_h, q_col_h, k_row_b, k_row_h, k_col_h, v_row_b, v_row_h, v_col_h,
                  o_stride, o_row_b, o_row_h, o_col_h,
                  GROUP, HEAD_DIM, HEAD_DIM_QK, HEAD_DIM_V, BLOCK_M, BLOCK_N, CAUSAL, EVEN_N, FUSED_LOOP,
                  WARP_SPECIALIZE, HEAD_GROUP)
    else:
        _tile(desc_q, desc_q_second, desc_k, desc_k_second, desc_v, Out, LSE, tl.program_id(0), n_m, n_bh, SQ, SK,
              causal_off, qk_scale, HEADS,
              q_row_b, q_row_h, q_col_h, k_row_b, k_row_h, k_col_h, v_row_b, v_row_h, v_col_h,
              o_stride, o_row_b, o_row_h, o_col_h,
              GROUP, HEAD_DIM, HEAD_DIM_QK, HEAD_DIM_V, BLOCK_M, BLOCK_N, CAUSAL, EVEN_N, FUSED_LOOP,
              WARP_SPECIALIZE, HEAD_GROUP)
