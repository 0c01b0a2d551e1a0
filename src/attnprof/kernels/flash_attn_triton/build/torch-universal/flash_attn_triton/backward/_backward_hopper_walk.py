"""The Hopper backward's walk (_backward_hopper.py): which query blocks a program's key block visits, in what
order, and, in its deterministic mode, the fixed order in which the key blocks' dQ adds land in each query
block: waited for and released through an int32 lock per 64 query rows.
"""

# no `from __future__ import annotations`: Triton 3.6's aggregates check their fields with isinstance against
# the annotations, which must be types, not strings

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ..forward._hopper import aggregate, number  # under this Triton's names, as the forward's

BLOCK_M = gl.constexpr(64)  # query rows per step
BLOCK_N = gl.constexpr(128)  # keys per program


@aggregate
class Steps:
    """The program's walk over query blocks: `total` steps, `count` blocks from block `lo` of each of the GROUP
    query heads from q_head0 that share its key/value head (a number may be a constant: lo is 0 unmasked)."""

    q_head0: gl.tensor | gl.constexpr
    lo: gl.tensor | gl.constexpr
    count: gl.tensor | gl.constexpr
    total: gl.tensor | gl.constexpr
    SEQ: gl.tensor | gl.constexpr

    @gluon.constexpr_function
    def __init__(self, q_head0, lo, count, total, SEQ):  # noqa: N803 (the kernel's name for the sequence length)
        self.q_head0, self.lo, self.count = number(q_head0), number(lo), number(count)
        self.total, self.SEQ = number(total), number(SEQ)

    @gluon.jit
    def row(self, t):
        """Row of step t's first query in the [rows, head_dim] views of Q, dO, dQ_acc, LSE and delta."""
        return (self.q_head0 + t // self.count) * self.SEQ + (self.lo + t % self.count) * BLOCK_M


@gluon.jit
def _load_acquire(ptr):
    return gl.inline_asm_elementwise("ld.global.acquire.gpu.b32 $0, [$1];", "=r,l", [ptr], dtype=gl.int32,
                                     is_pure=False, pack=1)


@gluon.jit
def _adds_done_release(ptr):
    """Once the warp's reduce-adds are done in global memory (the wait without .read, which would wait only for
    shared memory to be read, by each lane for its own: the lane that issued them is elected, so the warp
    syncs), lane 0 adds 1 to the lock with release semantics."""
    return gl.inline_asm_elementwise(
        "{ .reg .pred lane0; .reg .b32 lane; cp.async.bulk.wait_group 0; bar.warp.sync -1; mov.u32 lane, %laneid; "
        "setp.eq.u32 lane0, lane, 0; @lane0 red.release.gpu.global.add.s32 [$1], 1; mov.u32 $0, 0; }",
        "=r,l", [ptr], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _program_block(pid, n_blocks, DETERMINISTIC: gl.constexpr):
    """Program pid's (batch x key/value head, key block): a head's key blocks next to each other in the grid;
    DETERMINISTIC, highest first, the order of their turns (_turn), so that a program waits only on programs
    launched before it."""
    if DETERMINISTIC:
        return pid // n_blocks, n_blocks - 1 - pid % n_blocks
    else:
        return pid // n_blocks, pid % n_blocks


@gluon.jit
def _query_blocks(start_n, SEQ, left, right, MASKED: gl.constexpr):
    """The query blocks lo .. hi - 1 that see some of the keys from start_n: MASKED, those holding rows
    start_n - right .. start_n + BLOCK_N - 1 + left (left, right <= SEQ); else all."""
    if MASKED:
        lo = gl.maximum(start_n - right, 0) // BLOCK_M
        return lo, (gl.minimum(start_n + BLOCK_N + left, SEQ) + BLOCK_M - 1) // BLOCK_M
    else:
        return 0, SEQ // BLOCK_M


@gluon.jit
def _turn(steps, t, block, last, right, MASKED: gl.constexpr):
    """How many key blocks add into step t's rows before key block `block` (of 0 .. last): those above it.
    Highest first, as they reach the rows when they start together (a higher block starts lower in a masked
    walk, all at the first unmasked); the highest that sees query block m holds keys from m's last row + right
    rounded down to a block."""
    if MASKED:
        m = steps.lo + t % steps.count
        return gl.minimum((m * BLOCK_M + BLOCK_M - 1 + right) // BLOCK_N, last) - block
    else:
        return last - block
