"""The Hopper forward (sm_90), in Triton's Gluon dialect: FlashAttention-3's schedule, written out.

One program computes a 128-row query tile of one (batch, head) with three warp-specialised partitions:
- a producer warpgroup TMA-loads Q (two 64-row halves) and streams K and V blocks through a
  STAGES-deep shared-memory ring ("ready" barriers with expected bytes, "empty" barriers that both
  consumers arrive on before a stage is overwritten);
- two consumer warpgroups own 64 query rows each and run async wgmma: S = Q K^T with both operands in
  shared memory, then O += P V with P in registers; setmaxnreg gives them the producer's registers;
- OVERLAP (FA3's intra-warpgroup overlap): S_j = Q K_j^T and O += P_{j-1} V_{j-1} are issued back to
  back, and the softmax of block j runs while P V is still on the tensor cores;
- PINGPONG: two mbarriers pass a "GEMM turn" between the consumers, so one issues its GEMMs while the
  other does its softmax (FA3's inter-warpgroup schedule);
- causal (top-left, as SDPA): blocks above the diagonal are never loaded and only diagonal blocks are
  masked; tiles run longest first across groups of heads whose K/V fit in L2 (head_group).
Online softmax in base 2 with the scale folded into one FMA; O normalised by l and written by a TMA
store through Q's buffer, free by then; the natural-log LSE as the plain kernel stores it. A tile's
producer and consumer work (_load_tile, _consume_tile) is shared with the persistent form
(_hopper_persistent.py), which walks several tiles per program through the same ring.
Plain Triton (_forward.py) cannot express this schedule: its automatic warp specialisation takes one
key loop per kernel and neither overlaps the two GEMMs with the softmax nor alternates warpgroups;
the difference measured on the H200 is in docs/kernel.md.
"""

# no `from __future__ import annotations`: Triton 3.6's aggregates check their fields with isinstance against
# the annotations, which must be types, not strings

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
)
from triton.language.core import _aggregate as _core_aggregate

from ._hopper_steps import _overlap_blocks, _release_unread, _simple_blocks

# Triton 3.6 (torch 2.11's) keeps the aggregate decorator in triton.language.core only; later ones export it as
# gluon.aggregate, the same function. 3.6 also needs each aggregate's own __init__, a constexpr function (its
# dependency walk refuses object.__init__), which is handed plain numbers for constexpr arguments
aggregate = getattr(gluon, "aggregate", None) or _core_aggregate


@gluon.constexpr_function
def number(x):
    """An aggregate's number field: a launch argument as it is, a plain number (a constexpr argument, unwrapped on
    its way into a constexpr function) as a constexpr again, so `// group` by a constant 1 still folds away."""
    return x if isinstance(x, gl.tensor) else gl.constexpr(x)
# Triton 3.7 renamed the TMA copies (3.9 removed the old names); the same builtins either way
tma_load = tma.async_load if hasattr(tma, "async_load") else tma.async_copy_global_to_shared
tma_store = tma.async_store if hasattr(tma, "async_store") else tma.async_copy_shared_to_global
BLOCK_M = gl.constexpr(128)  # query rows per program
M_WG = gl.constexpr(64)  # query rows per consumer warpgroup


@aggregate
class HeadPlace:
    """Where the heads of one tensor lie: the TMA descriptor over its matrix view where it lies (_tma_views.py),
    the rows a batch and a head advance in it, the column a head starts at, and how many query heads share one
    of its heads (GQA's group for K and V, 1 for Q and O)."""

    # each number a launch argument, or a constant: Triton's launch makes an int argument of 1 a constexpr,
    # and the group of Q and O is the constant 1 (so `// group` folds away, as it did with a literal)
    desc: tma.tensor_descriptor
    row_b: gl.tensor | gl.constexpr
    row_h: gl.tensor | gl.constexpr
    col_h: gl.tensor | gl.constexpr
    group: gl.tensor | gl.constexpr

    @gluon.constexpr_function
    def __init__(self, desc, row_b, row_h, col_h, group):
        self.desc = desc
        self.row_b, self.row_h, self.col_h, self.group = number(row_b), number(row_h), number(col_h), number(group)

    @gluon.jit
    def origin(self, bh, HEADS):
        """(matrix row, column) of position 0 of program head bh."""
        b = bh // HEADS
        h = bh % HEADS // self.group
        return b * self.row_b + h * self.row_h, h * self.col_h


@aggregate
class KVRing:
    """The K/V ring in shared memory: STAGES blocks of K and of V, a "ready" barrier per stage that the TMA
    completes (expected bytes) and an "empty" one that both consumers arrive on before the stage is reloaded."""

    k: gl.shared_memory_descriptor
    v: gl.shared_memory_descriptor
    k_ready: gl.shared_memory_descriptor
    v_ready: gl.shared_memory_descriptor
    k_empty: gl.shared_memory_descriptor
    v_empty: gl.shared_memory_descriptor

    @gluon.constexpr_function
    def __init__(self, k, v, k_ready, v_ready, k_empty, v_empty):
        self.k, self.v = k, v
        self.k_ready, self.v_ready, self.k_empty, self.v_empty = k_ready, v_ready, k_empty, v_empty


@gluon.jit
def _tile_coords(tile, n_bh, SEQ, head_group, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr):
    """Tile -> (bh, start_m, number of key blocks): longest query tiles first across groups of
    head_group heads (their K/V stay in L2); head_group = n_bh is one global longest-first order."""
    n_m = SEQ // BLOCK_M
    group_start = tile // (n_m * head_group) * head_group
    heads_here = gl.minimum(n_bh - group_start, head_group)
    r = tile - group_start * n_m
    bh = group_start + r % heads_here
    start_m = (n_m - 1 - r // heads_here) * BLOCK_M
    if CAUSAL:  # noqa: SIM108 (a constexpr branch: the other side is never compiled)
        n_kv = (start_m + BLOCK_M) // BLOCK_N
    else:
        n_kv = SEQ // BLOCK_N
    return bh, start_m, n_kv


@gluon.jit
def _load_tile(q_at, k_at, v_at, q_smem, q_bars, ring, tile, q_first, c0, n_bh, SEQ, head_group, HEADS,
               BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    """The producer's work for one tile: its Q halves into q_smem[q_first], q_smem[q_first + 1], then its K
    and V blocks through the ring, the tile's block j in stage (c0 + j) % STAGES (c0: the blocks of this
    program's earlier tiles). Returns the number of blocks loaded."""
    bh, start_m, n_kv = _tile_coords(tile, n_bh, SEQ, head_group, CAUSAL, BLOCK_N)
    q_row, q_col = q_at.origin(bh, HEADS)
    k_row, k_col = k_at.origin(bh, HEADS)
    v_row, v_col = v_at.origin(bh, HEADS)
    for w in gl.static_range(2):
        mbarrier.expect(q_bars.index(q_first + w), q_at.desc.block_type.nbytes)
        tma_load(q_at.desc, [q_row + start_m + w * M_WG, q_col], q_bars.index(q_first + w),
                 q_smem.index(q_first + w))
    for j in range(n_kv):
        s = (c0 + j) % STAGES
        ph = (((c0 + j) // STAGES) & 1) ^ 1  # fresh barriers: waiting on parity 1 passes at once
        mbarrier.wait(ring.k_empty.index(s), ph)
        mbarrier.expect(ring.k_ready.index(s), k_at.desc.block_type.nbytes)
        tma_load(k_at.desc, [k_row + j * BLOCK_N, k_col], ring.k_ready.index(s), ring.k.index(s))
        mbarrier.wait(ring.v_empty.index(s), ph)
        mbarrier.expect(ring.v_ready.index(s), v_at.desc.block_type.nbytes)
        tma_load(v_at.desc, [v_row + j * BLOCK_N, v_col], ring.v_ready.index(s), ring.v.index(s))
    return n_kv


@gluon.jit
def _producer(q_at, k_at, v_at, q_smem, q_bars, ring, n_bh, SEQ, head_group, HEADS, BLOCK_N: gl.constexpr,
              STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    _load_tile(q_at, k_at, v_at, q_smem, q_bars, ring, gl.program_id(0), 0, 0, n_bh, SEQ, head_group, HEADS, BLOCK_N,
               STAGES, CAUSAL)


@gluon.jit
def _consume_tile(W: gl.constexpr, q, bh, start_m, n_kv, c0, sched_ph, o_at, LSE, ring, sched, qk_scale, SEQ, HEADS,
                  HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                  OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, SKIP_ABOVE: gl.constexpr):
    """Consumer W's 64 rows of one tile, from its Q in shared memory (q, loaded) to its O and LSE in memory;
    the tile's key block j is in ring stage (c0 + j) % STAGES. Returns the ping-pong phase. SKIP_ABOVE (causal,
    BLOCK_N < BLOCK_M): the tile's last key blocks that lie wholly above this warpgroup's rows (consumer 0's
    last block at BLOCK_N 64) are released unread instead of computed to zeros."""
    dtype: gl.constexpr = o_at.desc.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)

    q_start = start_m + W * M_WG
    rows = q_start + gl.arange(0, M_WG, layout=row_layout)
    n_all = n_kv  # the tile's blocks, all loaded by the producer
    if CAUSAL:
        n_full = (q_start + 1) // BLOCK_N  # key blocks entirely at or below every row of this warpgroup
        if SKIP_ABOVE:
            gl.static_assert(not PINGPONG, "ping-pong turns need both consumers to take every block")
            n_kv = gl.minimum(n_kv, (q_start + M_WG + BLOCK_N - 1) // BLOCK_N)  # those this warpgroup's rows see
    else:
        n_full = n_kv

    s_zero = gl.zeros([M_WG, BLOCK_N], gl.float32, s_layout)
    m_i = gl.full([M_WG], -float("inf"), gl.float32, row_layout)
    l_i = gl.full([M_WG], 0.0, gl.float32, row_layout)
    o = gl.zeros([M_WG, HEAD_DIM], gl.float32, o_layout)

    if OVERLAP:
        o, m_i, l_i, sched_ph = _overlap_blocks(q, ring, sched, sched_ph, o, m_i, l_i, qk_scale, rows, s_zero, c0,
                                                n_full, n_kv, dtype, W, BLOCK_N, STAGES, CAUSAL, PINGPONG, s_layout,
                                                p_layout, o_layout)
    else:
        o, m_i, l_i, sched_ph = _simple_blocks(q, ring, sched, sched_ph, o, m_i, l_i, qk_scale, rows, s_zero, c0,
                                               n_full, n_kv, dtype, W, BLOCK_N, STAGES, CAUSAL, PINGPONG, s_layout,
                                               p_layout, o_layout)

    _store_tile(q, o, m_i, l_i, bh, rows, q_start, o_at, LSE, SEQ, HEADS, dtype, o_layout)
    _release_unread(n_kv, n_all, c0, ring, STAGES)
    tma.store_wait(0)
    return sched_ph


@gluon.jit
def _store_tile(q, o, m_i, l_i, bh, rows, q_start, o_at, LSE, SEQ, HEADS, dtype: gl.constexpr,
                o_layout: gl.constexpr):
    """A consumer's epilogue: its rows' LSE (natural log), and O normalised, through shared memory (Q's buffer q,
    free by then) by a TMA store, which the caller waits for."""
    lse = (m_i + gl.log2(l_i)) * 0.6931471805599453
    gl.store(LSE + bh * SEQ + rows, lse)
    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    o = o / gl.expand_dims(l_o, 1)
    q.store(o.to(dtype))
    fence_async_shared()
    o_row, o_col = o_at.origin(bh, HEADS)
    tma_store(o_at.desc, [o_row + q_start, o_col], q)


@gluon.jit
def _consumer(W: gl.constexpr, o_at, LSE, q_smem, q_bars, ring, sched, qk_scale, n_bh, SEQ, head_group, HEADS,
              HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
              OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, SKIP_ABOVE: gl.constexpr):
    bh, start_m, n_kv = _tile_coords(gl.program_id(0), n_bh, SEQ, head_group, CAUSAL, BLOCK_N)
    mbarrier.wait(q_bars.index(W), 0)
    _consume_tile(W, q_smem.index(W), bh, start_m, n_kv, 0, 0, o_at, LSE, ring, sched, qk_scale, SEQ, HEADS, HEAD_DIM,
                  BLOCK_N, STAGES, CAUSAL, OVERLAP, PINGPONG, SKIP_ABOVE)


@gluon.jit
def flash_attn_triton_fwd_hopper(desc_q, desc_k, desc_v, desc_o, LSE, qk_scale, n_bh, SEQ, head_group, kv_group,
                                 HEADS, q_row_b, q_row_h, q_col_h, k_row_b, k_row_h, k_col_h, v_row_b, v_row_h,
                                 v_col_h, o_row_b, o_row_h, o_col_h,
                                 HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                                 CAUSAL: gl.constexpr, OVERLAP: gl.constexpr, PINGPONG: gl.constexpr,
                                 CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                                 PRODUCER_WARPS: gl.constexpr, SKIP_ABOVE: gl.constexpr):
    """Grid: one program per 128-row query tile (n_bh * SEQ / 128). Each descriptor is over its tensor's
    matrix view where it lies (_tma_views.py); row_b, row_h and col_h place a head in it (HeadPlace, and the
    K/V ring a KVRing, bundled here: the launch's arguments stay plain values). The name starts
    like the plain kernel's, so attnprof's kernel-name decoder and `--ncu`'s filter find both."""
    dtype: gl.constexpr = desc_q.dtype
    q_smem = gl.allocate_shared_memory(dtype, [2, M_WG, HEAD_DIM], desc_q.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], desc_k.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], desc_v.layout)
    q_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    sched = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(q_bars.index(i), count=1)
        mbarrier.init(sched.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)  # one arrival per consumer warpgroup
        mbarrier.init(v_empty.index(i), count=2)
    if PINGPONG:
        mbarrier.arrive(sched.index(0))  # consumer 0 issues its GEMMs first
    fence_async_shared()
    ring = KVRing(k_smem, v_smem, k_ready, v_ready, k_empty, v_empty)
    q_at = HeadPlace(desc_q, q_row_b, q_row_h, q_col_h, 1)
    k_at = HeadPlace(desc_k, k_row_b, k_row_h, k_col_h, kv_group)
    v_at = HeadPlace(desc_v, v_row_b, v_row_h, v_col_h, kv_group)
    o_at = HeadPlace(desc_o, o_row_b, o_row_h, o_col_h, 1)

    # the argument tuples are written out in the call: a tuple assigned to a name would turn its
    # constexprs into tensors
    gl.warp_specialize([
        (_consumer, (0, o_at, LSE, q_smem, q_bars, ring, sched, qk_scale, n_bh, SEQ, head_group, HEADS, HEAD_DIM,
                      BLOCK_N, STAGES, CAUSAL, OVERLAP, PINGPONG, SKIP_ABOVE)),
        (_consumer, (1, o_at, LSE, q_smem, q_bars, ring, sched, qk_scale, n_bh, SEQ, head_group, HEADS, HEAD_DIM,
                      BLOCK_N, STAGES, CAUSAL, OVERLAP, PINGPONG, SKIP_ABOVE)),
        (_producer, (q_at, k_at, v_at, q_smem, q_bars, ring, n_bh, SEQ, head_group, HEADS, BLOCK_N, STAGES, CAUSAL)),
    ], [4, PRODUCER_WARPS], [CONSUMER_REGS, PRODUCER_REGS])
