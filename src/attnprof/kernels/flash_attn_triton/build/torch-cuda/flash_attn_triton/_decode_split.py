"""The split-KV decode's first kernel (decode.py launches it): one program per (key split, batch x KV head x row
block) attends a tile of packed query rows to its split of one sequence's keys, and writes the output itself (one
split) or a float32 partial for the combine (_decode_combine.py).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._decode_combine import count_in, gdc_launch_dependents
from ._head_tiles import tile_mask
from ._online_softmax import finish, online_softmax_step, scores, with_sink


@triton.jit
def flash_attn_triton_decode_split(
        Q, K, V, Out, LSE, PartO, PartLSE, SeqLens, Count, Sink, BlockTable, qk_scale, cap_scale, stride_bt,
        page_size, paged_rows,
        stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
        stride_ob, stride_os, stride_oh, SQ, HKV, n_mblocks, left, right, splits,
        GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_QK: tl.constexpr, HEAD_DIM_V: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PARTIAL: tl.constexpr, FUSED: tl.constexpr,
        SOFTCAP: tl.constexpr, HAS_SINK: tl.constexpr, PAGED: tl.constexpr, TMA: tl.constexpr,
        SPLITS_P2: tl.constexpr, SPLITS_CHUNK: tl.constexpr, PDL: tl.constexpr):
    """Grid (splits, batch * KV heads * row blocks). PARTIAL (splits > 1): partials for the combine;
    else it writes the output itself. SOFTCAP: soft-capped scores (_online_softmax.scores); HAS_SINK: each
    query head's Sink logit joins its rows' denominators, once: here without a split, else in the combine.
    FUSED (with PARTIAL): each program counts itself in on its tile's
    counter (Count, zero before the launch) once its partials are stored, and the last of a tile's splits
    combines them (_decode_combine._combine_tile: SPLITS_P2, splits rounded up to a power of 2, and SPLITS_CHUNK,
    the splits one of its loads reads; 1 without FUSED) and sets the counter back to zero: no second launch.
    PAGED: a paged cache (flash-attn's block_table): K and V are [pages, page_size, HKV, D], key j of sequence b
    at row BlockTable[b, j // page_size] * page_size + j % page_size of the pages seen as one matrix
    (paged_rows rows); page_size a multiple of BLOCK_N, so a block never straddles two pages. HEAD_DIM: the Q and K
    tiles' width, HEAD_DIM_QK rounded up to a power of 2 (_head_tiles.py); HEAD_DIM_V: V's, the output's.
    TMA: K and V blocks through tensor descriptors made on the device, else through masked pointer loads (no
    descriptor to write and fence in each program: at batch 1 a program reads only a few blocks).
    PDL: the combine kernel follows as this grid's dependent (_decode_combine.py): each program lets it be placed
    once its keys are read, so that its launch overlaps the programs' stores; not as the program starts, which
    would place the combine's programs, waiting, beside the whole split kernel: a profiler's trace then shows the
    combine as long as the split kernel, and every sum of kernel times counts that twice."""
    split = tl.program_id(0)
    pid = tl.program_id(1)
    mblock = pid % n_mblocks
    b = pid // n_mblocks // HKV
    hkv = pid // n_mblocks % HKV
    seqlen = tl.load(SeqLens + b)
    rows = mblock * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < GROUP * SQ
    hq = hkv * GROUP + rows // SQ
    pos = seqlen - SQ + rows % SQ  # the query's position in its sequence
    offs_d = tl.arange(0, HEAD_DIM_V)
    q_ptrs = Q + b.to(tl.int64) * stride_qb + (rows % SQ)[:, None] * stride_qs + hq[:, None] * stride_qh
    q = tl.load(q_ptrs + tl.arange(0, HEAD_DIM)[None, :], mask=tile_mask(row_ok, HEAD_DIM, HEAD_DIM_QK), other=0.0)
    start, end = _split_keys(seqlen, SQ, left, split, splits, BLOCK_N, PAGED)
    if TMA:
        src_k, src_v = _key_descriptors(K, V, b, hkv, seqlen, paged_rows, stride_kb, stride_ks, stride_kh, stride_vb,
                                        stride_vs, stride_vh, HEAD_DIM, HEAD_DIM_QK, HEAD_DIM_V, BLOCK_N, PAGED)
    else:  # the head's first row (every page's, PAGED): _load_block adds the rows
        src_k = K + hkv * stride_kh + (0 if PAGED else b.to(tl.int64) * stride_kb)
        src_v = V + hkv * stride_vh + (0 if PAGED else b.to(tl.int64) * stride_vb)
    acc, l_i, m_i = _attend(q, src_k, src_v, BlockTable, b, stride_bt, page_size, start, end, pos, left, right,
                            qk_scale, cap_scale, stride_ks, stride_vs, BLOCK_M, BLOCK_N, HEAD_DIM, HEAD_DIM_QK,
                            HEAD_DIM_V, SOFTCAP, PAGED, TMA)
    if PDL:
        gdc_launch_dependents()
    if HAS_SINK:  # noqa: SIM102  (two static ifs: Triton folds each constexpr test on its own)
        if not PARTIAL:
            acc, l_i, m_i = with_sink(acc, l_i, m_i, tl.load(Sink + hq, mask=row_ok, other=0.0))
    out, lse = finish(acc, l_i, m_i)
    lse_rows = (b * HKV * GROUP + hq) * SQ + rows % SQ  # [B, Hq, Sq] row index
    o_ptrs = (Out + b.to(tl.int64) * stride_ob + (rows % SQ)[:, None] * stride_os + hq[:, None] * stride_oh
              + offs_d[None, :])
    _store_split(out, lse, l_i, o_ptrs, offs_d, LSE, lse_rows, PartO, PartLSE, split, splits, row_ok, HEAD_DIM_V,
                 PARTIAL)
    if FUSED:  # (only with PARTIAL: tiles_for) the tile's last split to count in combines its partials
        count_in(Count + pid, o_ptrs, LSE + lse_rows, PartO, PartLSE, lse_rows.to(tl.int64) * splits, row_ok, splits,
                 Sink + hq, HEAD_DIM_V, BLOCK_M, HAS_SINK, SPLITS_P2, SPLITS_CHUNK)


@triton.jit
def _split_keys(seqlen, SQ, left, split, splits, BLOCK_N: tl.constexpr, PAGED: tl.constexpr):
    """[start, end): this split's share of the keys any row of the sequence may see, in whole blocks."""
    lo = tl.maximum(seqlen - SQ - left, 0)
    if PAGED:  # whole blocks, each inside one page (the mask drops the keys before the window)
        lo = lo // BLOCK_N * BLOCK_N
    per_split = tl.cdiv(tl.cdiv(tl.maximum(seqlen - lo, 0), splits), BLOCK_N) * BLOCK_N
    start = lo + split * per_split
    return start, tl.minimum(start + per_split, seqlen)


@triton.jit
def _key_descriptors(K, V, b, hkv, seqlen, paged_rows, stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
                     HEAD_DIM: tl.constexpr, HEAD_DIM_QK: tl.constexpr, HEAD_DIM_V: tl.constexpr,
                     BLOCK_N: tl.constexpr, PAGED: tl.constexpr):
    """TMA descriptors over KV head hkv's keys and values: every page of the head (PAGED), else sequence b's first
    seqlen keys, past which the copy engine fills rows with zeros."""
    if PAGED:
        desc_k = tl.make_tensor_descriptor(K + hkv * stride_kh, shape=[paged_rows, HEAD_DIM_QK],
                                           strides=[stride_ks, 1], block_shape=[BLOCK_N, HEAD_DIM])
        desc_v = tl.make_tensor_descriptor(V + hkv * stride_vh, shape=[paged_rows, HEAD_DIM_V],
                                           strides=[stride_vs, 1], block_shape=[BLOCK_N, HEAD_DIM_V])
    else:
        desc_k = tl.make_tensor_descriptor(K + b.to(tl.int64) * stride_kb + hkv * stride_kh,
                                           shape=[seqlen, HEAD_DIM_QK], strides=[stride_ks, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
        desc_v = tl.make_tensor_descriptor(V + b.to(tl.int64) * stride_vb + hkv * stride_vh,
                                           shape=[seqlen, HEAD_DIM_V], strides=[stride_vs, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM_V])
    return desc_k, desc_v


@triton.jit
def _load_block(src, row, in_range, stride_s, WIDTH: tl.constexpr, COLUMNS: tl.constexpr, BLOCK_N: tl.constexpr,
                TMA: tl.constexpr):
    """BLOCK_N rows of K or V from `row` on, COLUMNS wide (WIDTH of them the head's): through the descriptor src
    (TMA), else from the head's first row src by pointers, keys outside in_range read as 0."""
    if TMA:  # one return after both branches: the compiler would still build what follows an early one
        block = src.load([row, 0])
    else:
        ptrs = src + (row + tl.arange(0, BLOCK_N)).to(tl.int64)[:, None] * stride_s + tl.arange(0, COLUMNS)[None, :]
        block = tl.load(ptrs, mask=tile_mask(in_range, COLUMNS, WIDTH), other=0.0)
    return block


@triton.jit
def _attend(q, src_k, src_v, BlockTable, b, stride_bt, page_size, start, end, pos, left, right, qk_scale, cap_scale,
            stride_ks, stride_vs, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
            HEAD_DIM_QK: tl.constexpr, HEAD_DIM_V: tl.constexpr, SOFTCAP: tl.constexpr, PAGED: tl.constexpr,
            TMA: tl.constexpr):
    """The online softmax of the rows (at positions pos) over keys [start, end), each row's window (left, right)
    masked in registers; a paged cache's pages (PAGED): sequence b's row of BlockTable. src_k, src_v: TMA
    descriptors or the head's first rows (_load_block). Returns acc, l, m."""
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_V], dtype=tl.float32)
    for start_n in tl.range(start, end, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        in_range = keys < end
        row = start_n
        if PAGED:
            row = tl.load(BlockTable + b * stride_bt + start_n // page_size) * page_size + start_n % page_size
        k = _load_block(src_k, row, in_range, stride_ks, HEAD_DIM_QK, HEAD_DIM, BLOCK_N, TMA)
        v = _load_block(src_v, row, in_range, stride_vs, HEAD_DIM_V, HEAD_DIM_V, BLOCK_N, TMA)
        if PAGED and TMA:  # the last page's rows past the sequence hold anything, NaN included: never multiplied
            v = tl.where(in_range[:, None], v, 0.0)  # in (pointer loads read them as 0 already)
        visible = (in_range[None, :] & (keys[None, :] >= pos[:, None] - left)
                   & (keys[None, :] <= pos[:, None] + right))
        qk = tl.where(visible, scores(tl.dot(q, k.T), qk_scale, cap_scale, SOFTCAP), -float("inf"))
        acc, l_i, m_i = online_softmax_step(acc, l_i, m_i, qk, v)
    return acc, l_i, m_i


@triton.jit
def _store_split(out, lse, l_i, o_ptrs, offs_d, LSE, lse_rows, PartO, PartLSE, split, splits, row_ok,
                 HEAD_DIM_V: tl.constexpr, PARTIAL: tl.constexpr):
    """The rows' output and LSE (one split; lse_rows: their [B, Hq, Sq] index), or their partials (an empty split
    weighs nothing in the combine: its partial LSE is -inf)."""
    if not PARTIAL:
        tl.store(o_ptrs, out.to(o_ptrs.dtype.element_ty), mask=row_ok[:, None])
        tl.store(LSE + lse_rows, lse, mask=row_ok)
    else:
        part = lse_rows.to(tl.int64) * splits + split
        tl.store(PartO + part[:, None] * HEAD_DIM_V + offs_d[None, :], out, mask=row_ok[:, None])
        tl.store(PartLSE + part, tl.where(l_i > 0, lse, -float("inf")), mask=row_ok)
