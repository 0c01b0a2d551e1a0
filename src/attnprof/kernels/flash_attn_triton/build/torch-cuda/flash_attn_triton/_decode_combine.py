"""The split-KV decode's combine (decode.py): each output row from its splits' partials, weighed by exp(lse_s -
lse), by a second kernel (flash_attn_triton_decode_combine) or by the last split of a tile (count_in). With a
learnable sink the sink's logit joins as one more partial with no value.

PDL (programmatic dependent launch, sm_90): the combine kernel is launched while the split kernel still runs (its
programs are placed once every split program has read its keys) and waits in gdc_wait for the split grid's
results, so the second launch's latency hides behind the split programs' stores; a Triton without grid
dependency control (the older ones torch 2.5 ships with may lack it) gets no-op stand-ins, and decode.py never asks
for it there."""

from __future__ import annotations

import triton
import triton.language as tl

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    GDC_AVAILABLE = True
except ImportError:  # an older Triton: stand-ins the kernels never reach (PDL is False there, decode.tiles_for)
    GDC_AVAILABLE = False

    @triton.jit
    def gdc_wait():
        pass

    @triton.jit
    def gdc_launch_dependents():
        pass


@triton.jit
def count_in(count, o_ptrs, lse_ptrs, PartO, PartLSE, first_part, row_ok, splits, sink_ptrs, HEAD_DIM: tl.constexpr,
             BLOCK_M: tl.constexpr, HAS_SINK: tl.constexpr, SPLITS_P2: tl.constexpr, SPLITS_CHUNK: tl.constexpr):
    """Count the program in on its tile's counter once its partials are stored; the tile's last split
    combines them and sets the counter back to zero for the next call on this stream."""
    tl.debug_barrier()  # every thread's partials are stored before the program counts itself in
    if tl.atomic_add(count, 1, sem="acq_rel") == splits - 1:
        _combine_tile(o_ptrs, lse_ptrs, PartO, PartLSE, first_part, row_ok, splits, sink_ptrs, HEAD_DIM, BLOCK_M,
                      HAS_SINK, SPLITS_P2, SPLITS_CHUNK)
        tl.atomic_xchg(count, 0)


@triton.jit
def _combine_tile(o_ptrs, lse_ptrs, PartO, PartLSE, first_part, row_ok, splits, sink_ptrs, HEAD_DIM: tl.constexpr,
                  BLOCK_M: tl.constexpr, HAS_SINK: tl.constexpr, SPLITS_P2: tl.constexpr,
                  SPLITS_CHUNK: tl.constexpr):
    """The combine of one tile's rows, by the program that finished its splits last: the others' partials
    are read from L2 (.cg), which their stores reached before their count. HAS_SINK: the rows' sink logits
    (sink_ptrs) join the denominator as one more partial with no value. Every split's LSE comes in one load
    (SPLITS_P2 wide) and the partial outputs SPLITS_CHUNK splits a load, so the combine waits on L2
    1 + splits / SPLITS_CHUNK times, not twice a split: this tail is the last program's alone."""
    offs_s = tl.arange(0, SPLITS_P2)
    lse_all = tl.load(PartLSE + first_part[:, None] + offs_s[None, :],
                      mask=row_ok[:, None] & (offs_s[None, :] < splits), other=-float("inf"), cache_modifier=".cg")
    m = tl.max(lse_all, 1)
    if HAS_SINK:
        sink = tl.load(sink_ptrs, mask=row_ok, other=-float("inf"))
        m = tl.maximum(m, sink)
    seen = m > -float("inf")
    m_use = tl.where(seen, m, 0.0)
    total = tl.sum(tl.exp(lse_all - m_use[:, None]), 1)
    if HAS_SINK:
        total += tl.exp(sink - m_use)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    offs_c = tl.arange(0, SPLITS_CHUNK)
    offs_d = tl.arange(0, HEAD_DIM)
    for first in tl.range(0, splits, SPLITS_CHUNK):
        part_ids = first_part[:, None] + first + offs_c[None, :]  # [BLOCK_M, SPLITS_CHUNK]
        in_chunk = row_ok[:, None] & (first + offs_c[None, :] < splits)
        # the chunk's weights again from L2, beside its partials: a register tensor has no column slice
        weight = tl.exp(tl.load(PartLSE + part_ids, mask=in_chunk, other=-float("inf"), cache_modifier=".cg")
                        - m_use[:, None])
        part = tl.load(PartO + part_ids[:, :, None] * HEAD_DIM + offs_d[None, None, :], mask=in_chunk[:, :, None],
                       other=0.0, cache_modifier=".cg")
        acc += tl.sum(weight[:, :, None] * part, 1)
    out = acc / tl.where(seen, total, 1.0)[:, None]
    tl.store(o_ptrs, out.to(o_ptrs.dtype.element_ty), mask=row_ok[:, None])
    tl.store(lse_ptrs, tl.where(seen, m + tl.log(tl.where(seen, total, 1.0)), float("inf")), mask=row_ok)


@triton.jit
def flash_attn_triton_decode_combine(Out, LSE, PartO, PartLSE, Sink, stride_ob, stride_os, stride_oh, HQ, SQ, splits,
                                     HEAD_DIM: tl.constexpr, SPLITS_P2: tl.constexpr, HAS_SINK: tl.constexpr,
                                     PDL: tl.constexpr):
    """Grid (batch * query heads * queries,): one output row from its splits' partials (and its head's sink
    logit, one more partial with no value, with HAS_SINK). PDL: launched as the split kernel's dependent, it
    waits for that grid's partials before its first load."""
    row = tl.program_id(0)
    b = row // (HQ * SQ)
    hq = row // SQ % HQ
    i = row % SQ
    offs_s = tl.arange(0, SPLITS_P2)
    if PDL:
        gdc_wait()
    lse = tl.load(PartLSE + row.to(tl.int64) * splits + offs_s, mask=offs_s < splits, other=-float("inf"))
    m = tl.max(lse, 0)
    sink = -float("inf")
    if HAS_SINK:
        sink = tl.load(Sink + hq)
        m = tl.maximum(m, sink)
    seen = m > -float("inf")
    weight = tl.exp(lse - tl.where(seen, m, 0.0))
    offs_d = tl.arange(0, HEAD_DIM)
    parts = tl.load(PartO + (row.to(tl.int64) * splits + offs_s)[:, None] * HEAD_DIM + offs_d[None, :],
                    mask=(offs_s < splits)[:, None], other=0.0)
    total = tl.sum(weight, 0)
    if HAS_SINK:
        total += tl.exp(sink - tl.where(seen, m, 0.0))
    out = tl.sum(parts * weight[:, None], 0) / tl.where(seen, total, 1.0)
    o_ptrs = Out + b.to(tl.int64) * stride_ob + i * stride_os + hq * stride_oh + offs_d
    tl.store(o_ptrs, out.to(Out.dtype.element_ty))
    tl.store(LSE + row, tl.where(seen, m + tl.log(tl.where(seen, total, 1.0)), float("inf")))
