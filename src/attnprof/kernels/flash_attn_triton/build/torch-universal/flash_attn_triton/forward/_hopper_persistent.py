"""The Hopper (Gluon) forward as a persistent kernel: one program per SM walks the 128-row tiles.

For short sequences, where a tile is only a few key blocks long, a program per tile pays its start, the
load of its Q and first K/V blocks and its epilogue once per tile; here each program strides over the
tiles (tile = program, program + programs, ...) and its producer warpgroup runs ahead across them:
- Q is double-buffered (two tiles of two 64-row halves): the producer loads tile i + 1's Q while the
  consumers work on tile i, and waits on q_empty (both consumers arrive once their output store from
  that buffer is done) before it reuses a buffer;
- the K/V ring is shared by all of a program's tiles: a tile's block j is in stage (c0 + j) % STAGES,
  c0 counting the blocks of the program's earlier tiles, on both sides of the ring;
- each tile runs the one-tile kernel's consumer code (_hopper._consume_tile), unchanged.
Tiles go longest first over all heads (the launch passes head_group = n_bh), so a fixed stride hands
every program about the same work. Same arguments as _hopper.flash_attn_triton_fwd_hopper.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier

from ._hopper import BLOCK_M, M_WG, HeadPlace, KVRing, _consume_tile, _load_tile, _tile_coords


@gluon.jit
def _tiles_of_this_program(n_bh, SEQ):
    """How many of the tiles program, program + programs, ... exist."""
    programs = gl.num_programs(0)
    return (n_bh * (SEQ // BLOCK_M) - gl.program_id(0) + programs - 1) // programs


@gluon.jit
def _producer(q_at, k_at, v_at, q_smem, q_ready, q_empty, ring, n_bh, SEQ, head_group, HEADS, BLOCK_N: gl.constexpr,
              STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    c = 0  # key blocks loaded for this program's earlier tiles
    for i in range(_tiles_of_this_program(n_bh, SEQ)):  # i: the program's tile count so far
        tile = gl.program_id(0) + i * gl.num_programs(0)
        buffer = i % 2
        mbarrier.wait(q_empty.index(buffer), ((i // 2) & 1) ^ 1)  # fresh barriers: parity 1 passes at once
        c += _load_tile(q_at, k_at, v_at, q_smem, q_ready, ring, tile, 2 * buffer, c, n_bh, SEQ, head_group, HEADS,
                        BLOCK_N, STAGES, CAUSAL)


@gluon.jit
def _consumer(W: gl.constexpr, o_at, LSE, q_smem, q_ready, q_empty, ring, sched, qk_scale, n_bh, SEQ, head_group,
              HEADS, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
              OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, SKIP_ABOVE: gl.constexpr):
    c = 0
    sched_ph = 0
    for i in range(_tiles_of_this_program(n_bh, SEQ)):
        tile = gl.program_id(0) + i * gl.num_programs(0)
        bh, start_m, n_kv = _tile_coords(tile, n_bh, SEQ, head_group, CAUSAL, BLOCK_N)
        buffer = i % 2
        mbarrier.wait(q_ready.index(2 * buffer + W), (i // 2) & 1)
        sched_ph = _consume_tile(W, q_smem.index(2 * buffer + W), bh, start_m, n_kv, c, sched_ph, o_at, LSE, ring,
                                 sched, qk_scale, SEQ, HEADS, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, OVERLAP, PINGPONG,
                                 SKIP_ABOVE)
        mbarrier.arrive(q_empty.index(buffer))  # its output store from this buffer has completed
        c += n_kv


@gluon.jit
def flash_attn_triton_fwd_hopper_persistent(
        desc_q, desc_k, desc_v, desc_o, LSE, qk_scale, n_bh, SEQ, head_group, kv_group, HEADS, q_row_b, q_row_h,
        q_col_h, k_row_b, k_row_h, k_col_h, v_row_b, v_row_h, v_col_h, o_row_b, o_row_h, o_col_h,
        HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
        OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
        PRODUCER_WARPS: gl.constexpr, SKIP_ABOVE: gl.constexpr):
    """Grid: min(tiles, SMs) programs, each striding over the 128-row tiles (the name starts like the other
    forwards', for attnprof's kernel-name decoder)."""
    dtype: gl.constexpr = desc_q.dtype
    q_smem = gl.allocate_shared_memory(dtype, [4, M_WG, HEAD_DIM], desc_q.layout)  # 2 tiles x 2 halves
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], desc_k.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], desc_v.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    sched = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(4):
        mbarrier.init(q_ready.index(i), count=1)
    for i in gl.static_range(2):
        mbarrier.init(q_empty.index(i), count=2)  # one arrival per consumer warpgroup
        mbarrier.init(sched.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)
        mbarrier.init(v_empty.index(i), count=2)
    if PINGPONG:
        mbarrier.arrive(sched.index(0))  # consumer 0 issues its GEMMs first
    fence_async_shared()
    ring = KVRing(k_smem, v_smem, k_ready, v_ready, k_empty, v_empty)
    q_at = HeadPlace(desc_q, q_row_b, q_row_h, q_col_h, 1)
    k_at = HeadPlace(desc_k, k_row_b, k_row_h, k_col_h, kv_group)
    v_at = HeadPlace(desc_v, v_row_b, v_row_h, v_col_h, kv_group)
    o_at = HeadPlace(desc_o, o_row_b, o_row_h, o_col_h, 1)

    gl.warp_specialize([  # argument tuples written out: a tuple assigned to a name turns constexprs into tensors
        (_consumer, (0, o_at, LSE, q_smem, q_ready, q_empty, ring, sched, qk_scale, n_bh, SEQ, head_group, HEADS,
                     HEAD_DIM, BLOCK_N, STAGES, CAUSAL, OVERLAP, PINGPONG, SKIP_ABOVE)),
        (_consumer, (1, o_at, LSE, q_smem, q_ready, q_empty, ring, sched, qk_scale, n_bh, SEQ, head_group, HEADS,
                     HEAD_DIM, BLOCK_N, STAGES, CAUSAL, OVERLAP, PINGPONG, SKIP_ABOVE)),
        (_producer, (q_at, k_at, v_at, q_smem, q_ready, q_empty, ring, n_bh, SEQ, head_group, HEADS, BLOCK_N, STAGES,
                     CAUSAL)),
    ], [4, PRODUCER_WARPS], [CONSUMER_REGS, PRODUCER_REGS])
