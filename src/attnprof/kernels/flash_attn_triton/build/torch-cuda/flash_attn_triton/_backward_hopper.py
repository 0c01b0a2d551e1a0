"""The Hopper backward (sm_90), in Triton's Gluon dialect: one pass with float32 TMA-reduced dQ (FA3's way).

One program (two warpgroups, 8 warps) owns BLOCK_N = 128 keys of one key/value head: K and V are TMA-loaded
into shared memory once, dK and dV live in float32 registers, and the program walks every (query head of
its GQA group, 64-row query block) that can see its keys in one flattened loop. Per query block:
    S^T = K Q^T,  dP^T = V dO^T            (async wgmma, both operands in shared memory, issued together)
    P^T = exp2(S^T * scale log2(e) - LSE2),  dV += P^T dO        (P^T from registers, while dP^T runs)
    dS^T = P^T * (dP^T - delta),  dK += dS^T Q                   (dS^T from registers)
    dQ_blk = dS K                         (dS^T through shared memory: both warpgroups' keys are summed)
    dQ_acc[rows] += dQ_blk                (fp32 through shared memory, one TMA reduce-add: cp.reduce.async.bulk)
The next block's Q and dO are TMA-loaded into the other half of a two-stage ring while this one computes,
and the reduce of block t runs while block t+1 computes (two dQ buffers). The five products are those of
_backward_atomic_kernels.flash_attn_triton_bwd_single (the plain Triton single pass), whose host-side
preprocess (delta, the zeroed accumulator) and postprocess (dQ = dQ_acc * scale) this kernel shares.
Causal (top-left, Sq = Sk): query blocks wholly above the keys are never visited; the mask is applied
to every visited block (two compares a score, cheaper than a second loop body).

Status: correct on the H200 (GPU tests against float64) but slower than the two-pass default (0.64-0.69x
cuDNN at D=128, 0.73x at D=64, against 0.74-0.79x and 0.88x), so it is opt-in only
(FLASH_ATTN_TRITON_ATOMIC_DQ=gluon). Without warp specialisation the two warpgroups run in lockstep
(two CTA barriers a step, dQ's epilogue in neither's shadow); FA3's producer warp, a dQ-writer warp and
the two warpgroups' ping-pong are what is missing (docs/kernel.md, "The Gluon single pass").
"""

from __future__ import annotations

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

from ._hopper import tma_load  # the TMA-load builtin under this Triton's name, as the forward loads

barrier = gl.barrier if hasattr(gl, "barrier") else gl.thread_barrier  # bar.sync of the CTA (renamed after 3.6)
BLOCK_M = gl.constexpr(64)  # query rows per step
BLOCK_N = gl.constexpr(128)  # keys per program: 64 per warpgroup


if hasattr(tma, "async_atomic_add"):
    tma_reduce_add = tma.async_atomic_add
else:  # Triton 3.6's Gluon has the op (what a tensor descriptor's atomic_add makes) but no wrapper for it
    @builtin
    def tma_reduce_add(tensor_desc, coord, src, _semantic=None):
        from triton._C.libtriton import ir

        coord = _semantic._convert_to_ir_values(coord, require_i64=False)
        _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord,
                                                  src.handle)


@gluon.jit
def _load_rows(desc_q, desc_do, desc_lse, desc_delta, q_smem, do_smem, lse_smem, delta_smem, ready, t, count,
               q_head0, lo, SEQ, pred):
    """TMA-load step t's Q, dO, LSE and delta rows into stage t % 2 (pred: whether step t exists). LSE and
    delta come by TMA too: loaded through pointers in the scores' column layout, their 16 addresses a
    thread spilled (ptxas, sm_90, Triton 3.6)."""
    s = t % 2
    q_row = (q_head0 + t // count) * SEQ + (lo + t % count) * BLOCK_M
    nbytes: gl.constexpr = (desc_q.block_type.nbytes + desc_do.block_type.nbytes + desc_lse.block_type.nbytes
              + desc_delta.block_type.nbytes)
    mbarrier.expect(ready.index(s), nbytes, pred=pred)
    tma_load(desc_q, [q_row, 0], ready.index(s), q_smem.index(s), pred=pred)
    tma_load(desc_do, [q_row, 0], ready.index(s), do_smem.index(s), pred=pred)
    tma_load(desc_lse, [q_row], ready.index(s), lse_smem.index(s), pred=pred)
    tma_load(desc_delta, [q_row], ready.index(s), delta_smem.index(s), pred=pred)


@gluon.jit
def _store_rows(ptr, acc, row0, HEAD_DIM: gl.constexpr, layout: gl.constexpr):
    rows = row0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout))
    gl.store(ptr + gl.expand_dims(rows.to(gl.int64), 1) * HEAD_DIM + gl.expand_dims(cols, 0),
             acc.to(ptr.dtype.element_ty))


@gluon.jit
def flash_attn_triton_bwd_hopper(desc_q, desc_k, desc_v, desc_do, desc_dq, desc_lse, desc_delta, dK, dV, sm_scale,
                                 qk_scale, SEQ, GROUP: gl.constexpr, HEAD_DIM: gl.constexpr,
                                 CAUSAL: gl.constexpr):
    """Grid: one program per (batch * key/value head, key block), the key blocks of one head next to each
    other, so that the programs running at once share a few heads' Q, dO and dQ_acc in L2 (with the
    key blocks outermost, 132 programs streamed 132 heads' from memory: slower than the two passes on
    the H200); causal: a head's longest programs first. The name starts like the other backward
    kernels', so attnprof's kernel-name decoder finds it."""
    dtype: gl.constexpr = desc_q.dtype
    st_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1],
                                                        instr_shape=[16, BLOCK_M, 16])
    dkv_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1],
                                                         instr_shape=[16, HEAD_DIM, 16])
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                        instr_shape=[16, HEAD_DIM // 2, 16])
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=dkv_layout, k_width=2)
    col_layout: gl.constexpr = gl.SliceLayout(0, st_layout)

    pid = gl.program_id(0)
    n_blocks = SEQ // BLOCK_N
    kv_bh = pid // n_blocks
    start_n = pid % n_blocks * BLOCK_N
    if CAUSAL:  # noqa: SIM108 (a constexpr branch: the other side is never compiled)
        lo = start_n // BLOCK_M
    else:
        lo = 0
    count = SEQ // BLOCK_M - lo  # query blocks per head of the group
    total = GROUP * count
    q_head0 = kv_bh * GROUP

    k_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], desc_k.layout)
    v_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], desc_v.layout)
    q_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M, HEAD_DIM], desc_q.layout)
    do_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M, HEAD_DIM], desc_do.layout)
    ds_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, BLOCK_M],
                                        gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], dtype))
    dq_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M, HEAD_DIM], desc_dq.layout)
    lse_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M], desc_lse.layout)
    delta_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M], desc_delta.layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for i in gl.static_range(2):
        mbarrier.init(ready.index(i), count=1)
    fence_async_shared()

    kv_row = kv_bh * SEQ + start_n
    mbarrier.expect(kv_bar, desc_k.block_type.nbytes + desc_v.block_type.nbytes)
    tma_load(desc_k, [kv_row, 0], kv_bar, k_smem)
    tma_load(desc_v, [kv_row, 0], kv_bar, v_smem)
    _load_rows(desc_q, desc_do, desc_lse, desc_delta, q_smem, do_smem, lse_smem, delta_smem, ready, 0, count,
               q_head0, lo, SEQ, total > 0)

    keys = start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, st_layout))
    dk = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, dkv_layout)
    dv = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, dkv_layout)
    mbarrier.wait(kv_bar, 0)

    for t in range(total):
        s = t % 2
        _load_rows(desc_q, desc_do, desc_lse, desc_delta, q_smem, do_smem, lse_smem, delta_smem, ready, t + 1,
                   count, q_head0, lo, SEQ, t + 1 < total)
        start_m = (lo + t % count) * BLOCK_M
        row0 = (q_head0 + t // count) * SEQ + start_m
        mbarrier.wait(ready.index(s), (t // 2) & 1)
        q = q_smem.index(s)
        do = do_smem.index(s)
        # zeros made here, not before the loop: loop-carried, they would hold 64 registers a thread
        st_tok = warpgroup_mma(k_smem, q.permute((1, 0)), gl.zeros([BLOCK_N, BLOCK_M], gl.float32, st_layout),
                               use_acc=False, is_async=True)
        dpt_tok = warpgroup_mma(v_smem, do.permute((1, 0)), gl.zeros([BLOCK_N, BLOCK_M], gl.float32, st_layout),
                                use_acc=False, is_async=True)
        lse2 = lse_smem.index(s).load(col_layout) * 1.4426950408889634
        st = warpgroup_mma_wait(1, deps=(st_tok, ))
        pt = gl.exp2(st * qk_scale - gl.expand_dims(lse2, 0))
        if CAUSAL:  # key j is visible to query i when j <= i
            cols = start_m + gl.arange(0, BLOCK_M, layout=col_layout)
            pt = gl.where(gl.expand_dims(keys, 1) <= gl.expand_dims(cols, 0), pt, 0.0)
        pt_op = gl.convert_layout(pt.to(dtype), op_layout)
        dv_tok = warpgroup_mma(pt_op, do, dv, is_async=True)
        delta = delta_smem.index(s).load(col_layout)
        dpt = warpgroup_mma_wait(1, deps=(dpt_tok, ))
        dst = (pt * (dpt - gl.expand_dims(delta, 0))).to(dtype)
        ds_smem.store(dst)
        fence_async_shared()
        dst_op = gl.convert_layout(dst, op_layout)
        dk_tok = warpgroup_mma(dst_op, q, dk, is_async=True)
        barrier()  # both warpgroups' dS^T rows are in shared memory
        dq_tok = warpgroup_mma(ds_smem.permute((1, 0)), k_smem, gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, dq_layout),
                               use_acc=False, is_async=True)
        dv, dk, dq, pt_op, dst_op = warpgroup_mma_wait(0, deps=(dv_tok, dk_tok, dq_tok, pt_op, dst_op))
        tma.store_wait(1)  # the reduce of step t - 2 has read this dQ buffer
        dq_smem.index(s).store(dq)
        fence_async_shared()
        barrier()  # every thread's dQ rows are written (and every warpgroup is done with dS^T)
        tma_reduce_add(desc_dq, [row0, 0], dq_smem.index(s))
    tma.store_wait(0)
    mbarrier.invalidate(kv_bar)
    for i in gl.static_range(2):
        mbarrier.invalidate(ready.index(i))
    _store_rows(dV, dv, kv_row, HEAD_DIM, dkv_layout)
    _store_rows(dK, dk * sm_scale, kv_row, HEAD_DIM, dkv_layout)
