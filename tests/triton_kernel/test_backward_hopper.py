"""The Gluon backward (_backward_hopper.py, opt-in by FLASH_ATTN_TRITON_ATOMIC_DQ=gluon) without a GPU: it
compiles for sm_90 with wgmma and the TMA reduce-add, fits in shared memory, and takes only the inputs it
is written for (everything else, the interpreter included, runs the plain Triton single pass)."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnprof.kernels import import_from_folder  # noqa: E402

SHARED_MEMORY_PER_BLOCK = 232448  # an H100/H200 block's limit (227 KiB)


def _module(name: str):
    return sys.modules[import_from_folder().__name__ + "." + name]


@pytest.mark.parametrize("head_dim, causal", [(128, True), (64, False)])
def test_the_gluon_backward_compiles_for_sm90_with_wgmma_and_a_tma_reduce_of_dq(head_dim, causal):
    pytest.importorskip("triton.experimental.gluon.nvidia.hopper")
    kernel = _module("_backward_hopper_launch").compile_for_sm90(head_dim, causal, "bf16", group=2)
    ptx = kernel.asm["ptx"]
    assert kernel.metadata.shared <= SHARED_MEMORY_PER_BLOCK
    assert ptx.count("wgmma.mma_async") >= 5  # S^T, dP^T, dV, dK, dQ
    assert "cp.reduce.async.bulk.tensor" in ptx and ".add" in ptx  # dQ by TMA reduce-add, not atomics
    assert "atom.global" not in ptx and "red.global" not in ptx
    assert kernel.metadata.num_warps == 8  # two warpgroups, 64 keys each


@pytest.mark.parametrize("head_dim, variant", [(128, "gluon_ws"), (64, "gluon_ws"), (128, "gluon_ws_dk")])
def test_the_warp_specialised_backward_compiles_for_sm90_with_setmaxnreg_and_two_reduces_a_step(head_dim, variant):
    pytest.importorskip("triton.experimental.gluon.nvidia.hopper")
    kernel = _module("_backward_hopper_launch").compile_for_sm90(head_dim, True, "bf16", group=2, variant=variant)
    ptx = kernel.asm["ptx"]
    assert kernel.metadata.shared <= SHARED_MEMORY_PER_BLOCK
    assert kernel.metadata.num_warps == 12  # two consumer warpgroups, one of the producer and dQ-writer warps
    assert "setmaxnreg.inc.sync.aligned.u32 \t240" in ptx and "setmaxnreg.dec.sync.aligned.u32 \t24" in ptx
    assert "cp.reduce.async.bulk.tensor" in ptx and "atom.global" not in ptx and "red.global" not in ptx


def test_only_sm90_self_attention_in_whole_key_blocks_goes_to_the_gluon_backward():
    unsupported = _module("_backward_hopper_launch").unsupported
    q, ragged, longer = (torch.empty(1, 2, n, 128, dtype=torch.bfloat16) for n in (1024, 1000, 1152))
    assert "multiple of 128" in unsupported(ragged, ragged, causal=False, causal_off=0)
    assert "as many queries as keys" in unsupported(q, longer, causal=False, causal_off=0)
    assert "top-left" in unsupported(q, q, causal=True, causal_off=128)
    assert "sm_90" in unsupported(q, q, causal=True, causal_off=0)  # a CPU tensor


def test_the_variable_asks_for_the_gluon_kernel_only_with_its_own_value(monkeypatch):
    requested = _module("_backward_single").gluon_requested
    for value, want in (("gluon", "gluon"), ("gluon_ws", "gluon_ws"), ("gluon_ws_dk", "gluon_ws_dk"), ("1", None),
                        ("0", None)):
        monkeypatch.setenv("FLASH_ATTN_TRITON_ATOMIC_DQ", value)
        assert requested() == want
