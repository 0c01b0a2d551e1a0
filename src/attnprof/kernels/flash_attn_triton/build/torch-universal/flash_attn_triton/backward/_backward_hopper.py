"""The Hopper backward (sm_90), in Triton's Gluon dialect: one pass with FlashAttention-3's warp
specialisation and float32 TMA-reduced dQ.

One program owns BLOCK_N = 128 keys of one key/value head and walks every (query head of its GQA group,
64-row query block) that can see them, in one flattened loop of steps. Its four partitions hand work over
through mbarriers, never through CTA-wide barriers:
- a producer warp TMA-loads K and V once, then each step's Q, dO, LSE and delta into a two-stage ring
  ("ready" with expected bytes; "empty", on which both consumers arrive when done with a step);
- two consumer warpgroups (the default partition and one worker), each owning 64 of the keys:
      S^T = K_w Q^T,  dP^T = V_w dO^T                  (async wgmma, operands in shared memory)
      P^T = exp2(S^T * scale log2(e) - LSE2),  dV_w += P^T dO      (P^T from registers)
      dS^T = P^T * (dP^T - delta),  dK_w += dS^T Q                 (dS^T from registers)
      dS^T_w into shared memory; once both halves are there ("ds_full"), each computes half of dQ's
      columns, dQ[:, w] = dS K[:, w], into a float32 buffer of its own ("dq_full");
  setmaxnreg gives them the other warps' registers;
- a dQ-writer warp adds each step's two dQ halves to the float32 accumulator by TMA reduce-add
  (cp.reduce.async.bulk.tensor) and frees the buffers ("dq_empty") once the copy engine has read them.
dS and dQ have two buffers each, like the ring: step t writes dS into stage t % 2 only after the producer
refilled that stage, that is after both consumers finished step t - 2, so dS needs no barrier of its own.
MASKED (Sq = Sk): key j sees query i when i - left <= j <= i + right (causal: left = SEQ, right = 0; a sliding
window: left = its width - 1; the masked backward's windows, masked_backward.py), so a program walks only the
query blocks that see some of its keys, and masks only the blocks an edge of the band crosses. The pre- and
postprocess kernels (delta with the zeroed accumulator; dQ = dQ_acc * scale) are the plain single pass's
(_backward_atomic_kernels.py), whose five block products these are. The kernel's names start like the other
backward kernels', for attnprof's kernel-name decoder.
"""

# no `from __future__ import annotations`: Triton 3.6's aggregates check their fields with isinstance against
# the annotations, which must be types, not strings

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ..forward._hopper import aggregate, tma_load  # under this Triton's names, as the forward's
from ._backward_hopper_walk import (
    BLOCK_M,
    BLOCK_N,
    Steps,
    _adds_done_release,
    _load_acquire,
    _program_block,
    _query_blocks,
    _turn,
)

N_WG = gl.constexpr(64)  # keys per consumer warpgroup


if hasattr(tma, "async_atomic_add"):
    tma_reduce_add = tma.async_atomic_add
else:  # Triton 3.6's Gluon has the op (what a tensor descriptor's atomic_add makes) but no wrapper for it
    @builtin
    def tma_reduce_add(tensor_desc, coord, src, _semantic=None):
        from triton._C.libtriton import ir

        coord = _semantic._convert_to_ir_values(coord, require_i64=False)
        _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord,
                                                  src.handle)


@aggregate
class StepRing:
    """A step's Q, dO, LSE and delta in shared memory, two stages deep: "ready" barriers the TMA completes,
    "empty" ones both consumers arrive on before the producer reloads the stage."""

    q: gl.shared_memory_descriptor
    do: gl.shared_memory_descriptor
    lse: gl.shared_memory_descriptor
    delta: gl.shared_memory_descriptor
    ready: gl.shared_memory_descriptor
    empty: gl.shared_memory_descriptor

    @gluon.constexpr_function
    def __init__(self, q, do, lse, delta, ready, empty):
        self.q, self.do, self.lse, self.delta, self.ready, self.empty = q, do, lse, delta, ready, empty


@aggregate
class DQStages:
    """dQ's way out: each consumer's float32 columns of a step (two stages of two halves) and the barriers
    between the consumers and the writer that reduce-adds them into dQ_acc."""

    smem: gl.shared_memory_descriptor
    full: gl.shared_memory_descriptor
    empty: gl.shared_memory_descriptor

    @gluon.constexpr_function
    def __init__(self, smem, full, empty):
        self.smem, self.full, self.empty = smem, full, empty


@gluon.jit
def _producer(desc_q, desc_k, desc_v, desc_do, desc_lse, desc_delta, k_smem, v_smem, kv_bar, ring, kv_row, steps):
    mbarrier.expect(kv_bar, desc_k.block_type.nbytes + desc_v.block_type.nbytes)
    tma_load(desc_k, [kv_row, 0], kv_bar, k_smem)
    tma_load(desc_v, [kv_row, 0], kv_bar, v_smem)
    nbytes: gl.constexpr = (desc_q.block_type.nbytes + desc_do.block_type.nbytes + desc_lse.block_type.nbytes
                            + desc_delta.block_type.nbytes)
    for t in range(steps.total):
        s = t % 2
        mbarrier.wait(ring.empty.index(s), ((t // 2) & 1) ^ 1)  # fresh barriers: waiting on parity 1 passes at once
        row = steps.row(t)
        mbarrier.expect(ring.ready.index(s), nbytes)
        tma_load(desc_q, [row, 0], ring.ready.index(s), ring.q.index(s))
        tma_load(desc_do, [row, 0], ring.ready.index(s), ring.do.index(s))
        tma_load(desc_lse, [row], ring.ready.index(s), ring.lse.index(s))
        tma_load(desc_delta, [row], ring.ready.index(s), ring.delta.index(s))


@gluon.jit
def _dq_writer(desc_dq, dq_out, steps, Locks, block, last, right, HEAD_DIM: gl.constexpr, MASKED: gl.constexpr,
               DETERMINISTIC: gl.constexpr):
    for t in range(steps.total):
        s = t % 2
        mbarrier.wait(dq_out.full.index(s), (t // 2) & 1)
        row = steps.row(t)
        if DETERMINISTIC:  # the same order of float32 adds into these rows on every run: wait for our turn
            lock = Locks + row // BLOCK_M
            turn = _turn(steps, t, block, last, right, MASKED)
            while _load_acquire(lock) != turn:
                pass
        for w in gl.static_range(2):
            tma_reduce_add(desc_dq, [row, w * (HEAD_DIM // 2)], dq_out.smem.index(2 * s + w))
        if DETERMINISTIC:
            _adds_done_release(lock)
        else:
            tma.store_wait(0)  # the copy engine has read both halves
        mbarrier.arrive(dq_out.empty.index(s))


@gluon.jit
def _put_dq(dq, dq_out, s, ph, W: gl.constexpr):
    """This warpgroup's dQ columns of a step into its float32 buffer of stage s, for the writer."""
    mbarrier.wait(dq_out.empty.index(s), ph ^ 1)  # the writer's reduce of step t - 2 has read this buffer
    dq_out.smem.index(2 * s + W).store(dq)
    fence_async_shared()
    mbarrier.arrive(dq_out.full.index(s))


@gluon.jit
def _consumer(W: gl.constexpr, dK, dV, k_smem, v_smem, kv_bar, ring, ds_smem, ds_full, dq_out, sm_scale, qk_scale,
              kv_row, start_n, steps, left, right, HEAD_DIM: gl.constexpr, MASKED: gl.constexpr):
    """Consumer warpgroup W: keys start_n + W * 64 ... + 63; their dK and dV rows at the end."""
    dtype: gl.constexpr = k_smem.dtype
    st_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, BLOCK_M, 16])
    dkv_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, HEAD_DIM, 16])
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, HEAD_DIM // 2, 16])
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=dkv_layout, k_width=2)
    col_layout: gl.constexpr = gl.SliceLayout(0, st_layout)

    k_w = k_smem.slice(W * N_WG, N_WG)
    v_w = v_smem.slice(W * N_WG, N_WG)
    k_cols = k_smem.slice(W * (HEAD_DIM // 2), HEAD_DIM // 2, dim=1)  # B of this warpgroup's dQ columns
    keys = start_n + W * N_WG + gl.arange(0, N_WG, layout=gl.SliceLayout(1, st_layout))
    dk = gl.zeros([N_WG, HEAD_DIM], gl.float32, dkv_layout)
    dv = gl.zeros([N_WG, HEAD_DIM], gl.float32, dkv_layout)
    mbarrier.wait(kv_bar, 0)
    for t in range(steps.total):
        s = t % 2
        ph = (t // 2) & 1
        mbarrier.wait(ring.ready.index(s), ph)
        q = ring.q.index(s)
        do = ring.do.index(s)
        st_tok = warpgroup_mma(k_w, q.permute((1, 0)), gl.zeros([N_WG, BLOCK_M], gl.float32, st_layout),
                               use_acc=False, is_async=True)
        dpt_tok = warpgroup_mma(v_w, do.permute((1, 0)), gl.zeros([N_WG, BLOCK_M], gl.float32, st_layout),
                                use_acc=False, is_async=True)
        lse2 = ring.lse.index(s).load(col_layout) * 1.4426950408889634
        st = warpgroup_mma_wait(1, deps=(st_tok, ))
        pt = gl.exp2(st * qk_scale - gl.expand_dims(lse2, 0))
        if MASKED:
            start_m = (steps.lo + t % steps.count) * BLOCK_M
            first_key = start_n + W * N_WG
            # an edge crosses the block: its first row misses its last key, or its last row its first key
            if (start_m + right < first_key + N_WG - 1) | (start_m + BLOCK_M - 1 - left > first_key):
                cols = gl.expand_dims(start_m + gl.arange(0, BLOCK_M, layout=col_layout), 0)
                key_col = gl.expand_dims(keys, 1)
                pt = gl.where((key_col <= cols + right) & (key_col >= cols - left), pt, 0.0)
        pt_op = gl.convert_layout(pt.to(dtype), op_layout)
        dv_tok = warpgroup_mma(pt_op, do, dv, is_async=True)
        delta = ring.delta.index(s).load(col_layout)
        dpt = warpgroup_mma_wait(1, deps=(dpt_tok, ))
        dst = (pt * (dpt - gl.expand_dims(delta, 0))).to(dtype)
        ds_smem.index(s).slice(W * N_WG, N_WG).store(dst)
        fence_async_shared()
        mbarrier.arrive(ds_full.index(s))
        dst_op = gl.convert_layout(dst, op_layout)
        # dK's product first, then dQ's once both halves of dS^T are in (issuing dQ's first, FA3's order with
        # dQ stored in dK's shadow, measured 0.92x against this order's 1.00x at S4096 D128 causal on the H200)
        dk_tok = warpgroup_mma(dst_op, q, dk, is_async=True)
        mbarrier.wait(ds_full.index(s), ph)  # the other warpgroup's dS^T rows are there too
        dq_tok = warpgroup_mma(ds_smem.index(s).permute((1, 0)), k_cols,
                               gl.zeros([BLOCK_M, HEAD_DIM // 2], gl.float32, dq_layout), use_acc=False, is_async=True)
        dv, dk, dq, pt_op, dst_op = warpgroup_mma_wait(0, deps=(dv_tok, dk_tok, dq_tok, pt_op, dst_op))
        mbarrier.arrive(ring.empty.index(s))  # done with this stage's Q, dO, LSE and delta
        _put_dq(dq, dq_out, s, ph, W)
    _store_rows(dV, dv, kv_row + W * N_WG, HEAD_DIM, dkv_layout)
    _store_rows(dK, dk * sm_scale, kv_row + W * N_WG, HEAD_DIM, dkv_layout)


@gluon.jit
def _store_rows(ptr, acc, row0, HEAD_DIM: gl.constexpr, layout: gl.constexpr):
    rows = row0 + gl.arange(0, N_WG, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout))
    gl.store(ptr + gl.expand_dims(rows.to(gl.int64), 1) * HEAD_DIM + gl.expand_dims(cols, 0),
             acc.to(ptr.dtype.element_ty))


@gluon.jit
def flash_attn_triton_bwd_hopper(desc_q, desc_k, desc_v, desc_do, desc_dq, desc_lse, desc_delta, dK, dV, Locks,
                                 sm_scale, qk_scale, SEQ, left, right, GROUP: gl.constexpr, HEAD_DIM: gl.constexpr,
                                 MASKED: gl.constexpr, DETERMINISTIC: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                                 WORKER_REGS: gl.constexpr):
    """Grid: one program per (batch * key/value head, key block), a head's key blocks next to each other, so
    that the programs running at once share a few heads' Q, dO and dQ_acc in L2 (causal: a head's longest
    first). Launched with 4 warps, the default partition's; warp_specialize adds the other consumer
    warpgroup and the warpgroup of the two single warps (12 warps: setmaxnreg works on whole warpgroups).
    DETERMINISTIC: the key blocks add into each 64-row block of dQ_acc in a fixed order, highest first
    (_turn), counted by an int32 lock per row block (Locks, zeroed); a head's highest key block comes first
    in the grid, so a program waits only on programs launched before it (FlashAttention-3's order)."""
    dtype: gl.constexpr = desc_q.dtype
    pid = gl.program_id(0)
    n_blocks = SEQ // BLOCK_N
    kv_bh, block = _program_block(pid, n_blocks, DETERMINISTIC)
    start_n = block * BLOCK_N
    lo, hi = _query_blocks(start_n, SEQ, left, right, MASKED)
    count = hi - lo  # query blocks per head of the group
    total = GROUP * count
    q_head0 = kv_bh * GROUP
    kv_row = kv_bh * SEQ + start_n

    k_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], desc_k.layout)
    v_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], desc_v.layout)
    q_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M, HEAD_DIM], desc_q.layout)
    do_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M, HEAD_DIM], desc_do.layout)
    ds_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, BLOCK_M],
                                        gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], dtype))
    dq_smem = gl.allocate_shared_memory(gl.float32, [4, BLOCK_M, HEAD_DIM // 2], desc_dq.layout)
    lse_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M], desc_lse.layout)
    delta_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M], desc_delta.layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    ds_full = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    dq_full = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    dq_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for i in gl.static_range(2):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(dq_empty.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # one arrival per consumer warpgroup
        mbarrier.init(ds_full.index(i), count=2)
        mbarrier.init(dq_full.index(i), count=2)
    fence_async_shared()
    ring = StepRing(q_smem, do_smem, lse_smem, delta_smem, ready, empty)
    dq_out = DQStages(dq_smem, dq_full, dq_empty)
    steps = Steps(q_head0, lo, count, total, SEQ)

    # the argument tuples are written out in the call: a tuple assigned to a name would turn its
    # constexprs into tensors
    gl.warp_specialize([
        (_consumer, (0, dK, dV, k_smem, v_smem, kv_bar, ring, ds_smem, ds_full, dq_out, sm_scale, qk_scale, kv_row,
                     start_n, steps, left, right, HEAD_DIM, MASKED)),
        (_consumer, (1, dK, dV, k_smem, v_smem, kv_bar, ring, ds_smem, ds_full, dq_out, sm_scale, qk_scale, kv_row,
                     start_n, steps, left, right, HEAD_DIM, MASKED)),
        (_producer, (desc_q, desc_k, desc_v, desc_do, desc_lse, desc_delta, k_smem, v_smem, kv_bar, ring, kv_row,
                     steps)),
        (_dq_writer, (desc_dq, dq_out, steps, Locks, block, n_blocks - 1, right, HEAD_DIM, MASKED, DETERMINISTIC)),
    ], [4, 1, 1], [CONSUMER_REGS, WORKER_REGS, WORKER_REGS])
