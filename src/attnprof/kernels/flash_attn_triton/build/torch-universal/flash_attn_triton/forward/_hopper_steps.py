"""One consumer warpgroup's key blocks in the Hopper forward (_hopper.py): the online softmax, the GEMMs issued
against the K/V ring, the ping-pong turns between the two consumers, and a tile's blocks with FA3's intra-warpgroup
overlap or without it. Inlined into _hopper._consume_tile, which both the one-tile and the persistent kernels run.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma, warpgroup_mma_wait


@gluon.jit
def _softmax(s, m_i, l_i, qk_scale, rows, col0, MASK: gl.constexpr, BLOCK_N: gl.constexpr,
             s_layout: gl.constexpr, o_layout: gl.constexpr):
    """Online softmax of one block: P (fp32, S's layout), alpha (in O's row layout), l, m."""
    if MASK:
        cols = col0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        s = gl.where(gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1), s, -float("inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), l_i, m_new


@gluon.jit
def _issue_qk(q, ring, j, s_zero, STAGES: gl.constexpr):
    s = j % STAGES
    mbarrier.wait(ring.k_ready.index(s), (j // STAGES) & 1)
    return warpgroup_mma(q, ring.k.index(s).permute((1, 0)), s_zero, use_acc=False, is_async=True)


@gluon.jit
def _sched_wait(sched, sched_ph, W: gl.constexpr, PINGPONG: gl.constexpr):
    if PINGPONG:
        mbarrier.wait(sched.index(W), sched_ph)
        sched_ph ^= 1
    return sched_ph


@gluon.jit
def _sched_pass(sched, W: gl.constexpr, PINGPONG: gl.constexpr):
    if PINGPONG:
        mbarrier.arrive(sched.index(1 - W))


@gluon.jit
def _overlap_step(j, c0, q, ring, sched, sched_ph, o, p_op, alpha, m_i, l_i, qk_scale, rows, s_zero, W: gl.constexpr,
                  MASK: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, PINGPONG: gl.constexpr,
                  s_layout: gl.constexpr, p_layout: gl.constexpr, o_layout: gl.constexpr):
    """Issue S_j = Q K_j^T and O += P_{j-1} V_{j-1}; softmax(S_j) while PV runs. Block j of the tile is in
    ring stage (c0 + j) % STAGES (c0: the blocks of the program's earlier tiles)."""
    c = c0 + j
    sched_ph = _sched_wait(sched, sched_ph, W, PINGPONG)
    s_tok = _issue_qk(q, ring, c, s_zero, STAGES)
    o = o * gl.expand_dims(alpha, 1)  # rescale by the previous block's alpha, in QK's shadow
    sv = (c - 1) % STAGES
    mbarrier.wait(ring.v_ready.index(sv), ((c - 1) // STAGES) & 1)
    o_tok = warpgroup_mma(p_op, ring.v.index(sv), o, is_async=True)
    _sched_pass(sched, W, PINGPONG)
    s_acc = warpgroup_mma_wait(1, deps=(s_tok, ))
    mbarrier.arrive(ring.k_empty.index(c % STAGES))
    p, alpha, l_i, m_i = _softmax(s_acc, m_i, l_i, qk_scale, rows, j * BLOCK_N, MASK, BLOCK_N, s_layout, o_layout)
    o, p_old = warpgroup_mma_wait(0, deps=(o_tok, p_op))
    mbarrier.arrive(ring.v_empty.index(sv))
    p_op = gl.convert_layout(p.to(p_old.dtype), p_layout)
    return o, p_op, alpha, m_i, l_i, sched_ph


@gluon.jit
def _simple_step(j, c0, q, ring, sched, sched_ph, o, m_i, l_i, qk_scale, rows, s_zero, dtype: gl.constexpr,
                 W: gl.constexpr, MASK: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                 PINGPONG: gl.constexpr, s_layout: gl.constexpr, p_layout: gl.constexpr, o_layout: gl.constexpr):
    """No intra-warpgroup overlap: S = QK^T, wait, softmax, O = O*alpha + P V, wait (ring as _overlap_step's)."""
    sched_ph = _sched_wait(sched, sched_ph, W, PINGPONG)
    s_tok = _issue_qk(q, ring, c0 + j, s_zero, STAGES)
    _sched_pass(sched, W, PINGPONG)
    s_acc = warpgroup_mma_wait(0, deps=(s_tok, ))
    s = (c0 + j) % STAGES
    mbarrier.arrive(ring.k_empty.index(s))
    p, alpha, l_i, m_i = _softmax(s_acc, m_i, l_i, qk_scale, rows, j * BLOCK_N, MASK, BLOCK_N, s_layout, o_layout)
    o = o * gl.expand_dims(alpha, 1)
    p_op = gl.convert_layout(p.to(dtype), p_layout)
    mbarrier.wait(ring.v_ready.index(s), ((c0 + j) // STAGES) & 1)
    o_tok = warpgroup_mma(p_op, ring.v.index(s), o, is_async=True)
    o, p_op = warpgroup_mma_wait(0, deps=(o_tok, p_op))
    mbarrier.arrive(ring.v_empty.index(s))
    return o, m_i, l_i, sched_ph


@gluon.jit
def _overlap_blocks(q, ring, sched, sched_ph, o, m_i, l_i, qk_scale, rows, s_zero, c0, n_full, n_kv,
                    dtype: gl.constexpr, W: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                    CAUSAL: gl.constexpr, PINGPONG: gl.constexpr, s_layout: gl.constexpr, p_layout: gl.constexpr,
                    o_layout: gl.constexpr):
    """A consumer's n_kv key blocks of a tile with FA3's intra-warpgroup overlap (_overlap_step), the first n_full
    unmasked: S_0 and its softmax first, the last P V after the loop. Returns O (not normalised), m, l and the
    ping-pong phase."""
    # prologue: S_0 and its softmax
    sched_ph = _sched_wait(sched, sched_ph, W, PINGPONG)
    s_tok = _issue_qk(q, ring, c0, s_zero, STAGES)
    _sched_pass(sched, W, PINGPONG)
    s_acc = warpgroup_mma_wait(0, deps=(s_tok, ))
    mbarrier.arrive(ring.k_empty.index(c0 % STAGES))
    if n_full > 0:
        p, alpha, l_i, m_i = _softmax(s_acc, m_i, l_i, qk_scale, rows, 0, False, BLOCK_N, s_layout, o_layout)
    else:
        p, alpha, l_i, m_i = _softmax(s_acc, m_i, l_i, qk_scale, rows, 0, True, BLOCK_N, s_layout, o_layout)
    p_op = gl.convert_layout(p.to(dtype), p_layout)
    for j in range(1, gl.maximum(n_full, 1)):
        o, p_op, alpha, m_i, l_i, sched_ph = _overlap_step(
            j, c0, q, ring, sched, sched_ph, o, p_op, alpha, m_i, l_i, qk_scale, rows, s_zero, W, False, BLOCK_N,
            STAGES, PINGPONG, s_layout, p_layout, o_layout)
    if CAUSAL:
        for j in range(gl.maximum(n_full, 1), n_kv):
            o, p_op, alpha, m_i, l_i, sched_ph = _overlap_step(
                j, c0, q, ring, sched, sched_ph, o, p_op, alpha, m_i, l_i, qk_scale, rows, s_zero, W, True,
                BLOCK_N, STAGES, PINGPONG, s_layout, p_layout, o_layout)
    # epilogue: the last P V
    o = o * gl.expand_dims(alpha, 1)
    sv = (c0 + n_kv - 1) % STAGES
    mbarrier.wait(ring.v_ready.index(sv), ((c0 + n_kv - 1) // STAGES) & 1)
    o_tok = warpgroup_mma(p_op, ring.v.index(sv), o, is_async=True)
    o, p_op = warpgroup_mma_wait(0, deps=(o_tok, p_op))
    mbarrier.arrive(ring.v_empty.index(sv))
    return o, m_i, l_i, sched_ph


@gluon.jit
def _simple_blocks(q, ring, sched, sched_ph, o, m_i, l_i, qk_scale, rows, s_zero, c0, n_full, n_kv,
                   dtype: gl.constexpr, W: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                   CAUSAL: gl.constexpr, PINGPONG: gl.constexpr, s_layout: gl.constexpr, p_layout: gl.constexpr,
                   o_layout: gl.constexpr):
    """_overlap_blocks without the overlap: each block's S, softmax and P V in turn (_simple_step)."""
    for j in range(0, n_full):
        o, m_i, l_i, sched_ph = _simple_step(j, c0, q, ring, sched, sched_ph, o, m_i, l_i, qk_scale, rows, s_zero,
                                             dtype, W, False, BLOCK_N, STAGES, PINGPONG, s_layout, p_layout,
                                             o_layout)
    if CAUSAL:
        for j in range(n_full, n_kv):
            o, m_i, l_i, sched_ph = _simple_step(j, c0, q, ring, sched, sched_ph, o, m_i, l_i, qk_scale, rows,
                                                 s_zero, dtype, W, True, BLOCK_N, STAGES, PINGPONG, s_layout,
                                                 p_layout, o_layout)
    return o, m_i, l_i, sched_ph


@gluon.jit
def _release_unread(n_read, n_all, c0, ring, STAGES: gl.constexpr):
    """Arrive on the empty barriers of the tile's blocks n_read.. that this consumer skipped, each once it
    has been loaded: an arrival before the load could complete the stage's previous phase."""
    for j in range(n_read, n_all):
        c = c0 + j
        mbarrier.wait(ring.k_ready.index(c % STAGES), (c // STAGES) & 1)
        mbarrier.arrive(ring.k_empty.index(c % STAGES))
        mbarrier.wait(ring.v_ready.index(c % STAGES), (c // STAGES) & 1)
        mbarrier.arrive(ring.v_empty.index(c % STAGES))
