"""The Gluon backward's deterministic mode without a GPU: dQ's float32 reduce-adds into each 64-row block of
the accumulator happen in one fixed order (the same sum, bit for bit, on every run), and the order cannot
deadlock. The order's two functions are the kernel's own, run as Python; the kernel compiles for sm_90."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton.experimental.gluon.nvidia.hopper")

from attnprof.kernels import import_from_folder  # noqa: E402

SHARED_MEMORY_PER_BLOCK = 232448  # an H100/H200 block's limit (227 KiB)


def _module(name: str):
    return importlib.import_module(import_from_folder().__name__ + "." + name)


@pytest.fixture
def kernel(monkeypatch):
    """The backward's walk with gl.minimum and gl.maximum on Python ints, so its @gluon.jit helpers run as Python."""
    module = _module("backward._backward_hopper_walk")
    monkeypatch.setattr(module.gl, "minimum", min)
    monkeypatch.setattr(module.gl, "maximum", max)
    return module


def _turns(kernel, seq: int, left: int, right: int, masked: bool) -> dict[int, dict[int, int]]:
    """Per query block of one head: each program (its place in the grid, deterministic) that adds into it, and
    its turn (how many add before it)."""
    blocks = seq // int(kernel.BLOCK_N)
    turns: dict[int, dict[int, int]] = {}
    for pid in range(blocks):
        head, block = (int(x) for x in kernel._program_block.fn(pid, blocks, True))
        assert head == 0
        lo, hi = (int(x) for x in kernel._query_blocks.fn(block * int(kernel.BLOCK_N), seq, left, right, masked))
        steps = SimpleNamespace(lo=lo, count=hi - lo)
        for t in range(hi - lo):
            turn = int(kernel._turn.fn(steps, t, block, blocks - 1, right, masked))
            turns.setdefault(lo + t, {})[pid] = turn
    return turns


@pytest.mark.parametrize("seq, left, right, masked", [
    (1024, 1024, 1024, False),  # no mask
    (2048, 2048, 0, True),  # causal: (seq, 0)
    (2048, 255, 0, True),  # a sliding window of 256
    (2048, 511, 127, True),  # a band on both sides
    (1024, 64, 300, True),  # wider to the right
    (1024, 0, 0, True),  # the diagonal alone
])
def test_each_key_block_adding_into_a_query_block_has_its_own_turn_after_those_launched_before_it(
        kernel, seq, left, right, masked):
    """Turns 0 .. k-1 for the k programs that add into a query block, so the lock (the count of adds done)
    reaches each in turn; and in the order of the grid (the highest key block first), so a program waits only
    on programs launched before it: no deadlock, however few fit at once."""
    turns = _turns(kernel, seq, left, right, masked)
    assert sorted(turns) == list(range(seq // int(kernel.BLOCK_M)))  # every query row gets its dQ
    for m, by_program in turns.items():
        assert sorted(by_program.values()) == list(range(len(by_program))), (m, by_program)
        assert sorted(by_program, key=by_program.get) == sorted(by_program), (m, by_program)


def test_the_fast_kernel_keeps_a_heads_key_blocks_in_order(kernel):
    """Its grid, as before the deterministic mode: a causal head's longest walk (key block 0) first."""
    assert [tuple(int(x) for x in kernel._program_block.fn(pid, 4, False)) for pid in range(6)] == [
        (0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]


@pytest.mark.parametrize("head_dim, causal, group", [(128, True, 1), (64, False, 2)])
def test_the_deterministic_kernel_waits_for_its_turn_and_releases_after_its_adds_are_in_memory(head_dim, causal,
                                                                                                group):
    launch = _module("backward._backward_hopper_launch")
    fast, fixed = (launch.compile_for_sm90(head_dim, causal, "bf16", group, deterministic=d) for d in (False, True))
    ptx = fixed.asm["ptx"]
    assert fixed.metadata.shared <= SHARED_MEMORY_PER_BLOCK
    assert fixed.metadata.num_warps == 12
    assert "ld.global.acquire.gpu.b32" in ptx  # the turn's wait
    # the adds complete in global memory (no .read, which waits only for shared memory), then one release
    assert "cp.async.bulk.wait_group 0; bar.warp.sync -1;" in ptx and "red.release.gpu.global.add.s32" in ptx
    assert "acquire" not in fast.asm["ptx"] and "red.release" not in fast.asm["ptx"]
