"""Kernel paths the interpreter runs but only the compiler can refuse, compiled for sm_90 with Triton's own
ptxas, no GPU needed: the interpreter runs a `@triton.jit` function as Python (an early `return` inside a
constexpr branch ends it there), while the compiler builds what follows too: the decode's K/V read, written so,
once failed to compile with TMA descriptors (the default) while every interpreter test passed."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "kernel"))
from plain_kernels_sm90 import _build  # noqa: E402

from attnprof.kernels import import_from_folder  # noqa: E402

DIMS = {"HEAD_DIM": 128, "HEAD_DIM_QK": 128, "HEAD_DIM_V": 128}


@pytest.mark.parametrize("tma", [True, False])
@pytest.mark.parametrize("paged", [False, True])
def test_the_decode_split_kernel_compiles_reading_by_descriptors_or_pointers(paged, tma):
    decode = import_from_folder().decode
    constants = {**DIMS, "GROUP": 4, "BLOCK_M": 16, "BLOCK_N": 64, "PARTIAL": True, "FUSED": False,
                 "SOFTCAP": False, "HAS_SINK": False, "PAGED": paged, "TMA": tma, "PDL": False}
    kernel = _build(decode.flash_attn_triton_decode_split, constants, 4, 2)
    assert ("cp.async.bulk.tensor" in kernel.asm["ptx"]) == tma  # K and V come by TMA copies or not at all


@pytest.mark.parametrize("pdl", [False, True])
def test_the_decode_combine_waits_on_the_split_grid_only_as_its_dependent(pdl):
    """With PDL the split kernel lets its dependent be placed and the combine waits for the split grid's partials
    before it reads them (griddepcontrol); without it neither instruction is there, so the shipped PTX is as it
    was. A combine launched early without its wait would read partials not yet written."""
    module = import_from_folder()
    split = _build(module.decode.flash_attn_triton_decode_split, {
        **DIMS, "GROUP": 4, "BLOCK_M": 16, "BLOCK_N": 64, "PARTIAL": True, "FUSED": False, "SOFTCAP": False,
        "HAS_SINK": False, "PAGED": False, "TMA": False, "PDL": pdl}, 4, 2).asm["ptx"]
    combine = _build(module._decode_combine.flash_attn_triton_decode_combine, {
        "HEAD_DIM": 128, "SPLITS_P2": 16, "HAS_SINK": False, "PDL": pdl}, 4, 3).asm["ptx"]
    assert ("griddepcontrol.launch_dependents" in split) == pdl
    assert ("griddepcontrol.wait" in combine) == pdl
    if pdl:  # the wait comes before the combine's first load of a partial
        assert combine.index("griddepcontrol.wait") < combine.index("ld.global")
        # the split programs let the combine be placed once their keys are read, before their stores: placed at
        # their start, the waiting combine would span the whole split kernel in a trace
        trigger = split.index("griddepcontrol.launch_dependents")
        assert split.rindex("ld.global") < trigger < split.index("st.global")


@pytest.mark.parametrize("qk, v_dim", [(256, 256), (192, 128)])
def test_the_wide_backwards_dkdv_pass_compiles_to_hoppers_wgmma(qk, v_dim):
    """The shipped wide tiles (_backward.CONFIGS) give a dK/dV program 64 keys (256) or 128 (192): 32 compiled its
    products to Ampere's mma.sync, and ran 1.3-1.8x slower on an H100 (docs/kernel.md, sessions 19 and 22)."""
    module = import_from_folder()
    config = module.backward._backward.CONFIGS[qk]
    constants = {"HEAD_DIM": 256, "HEAD_DIM_QK": qk, "HEAD_DIM_V": v_dim, "GROUP": 1, "CAUSAL": True,
                 "BLOCK_M": config.dkdv_m, "BLOCK_N": config.dkdv_n, "EVEN_M": True}
    ptx = _build(module.backward._backward_kernels.flash_attn_triton_bwd_dkdv, constants, config.warps,
                 config.stages).asm["ptx"]
    assert "wgmma.mma_async" in ptx and "mma.sync" not in ptx


def _forward_ptx(module, qk: int, v_dim: int) -> str:
    config = module._launch.SM90_CONFIGS[256]
    constants = {"HEAD_DIM": 256, "HEAD_DIM_QK": qk, "HEAD_DIM_V": v_dim, **config.kwargs, "GROUP": 1,
                 "CAUSAL": True, "EVEN_N": True, "HEAD_GROUP": 1}
    return _build(module.forward._forward.flash_attn_triton_fwd, constants, config.num_warps,
                  config.num_stages).asm["ptx"]


def test_the_192_wide_forward_multiplies_192_columns_not_256():
    """q/k 192 is read as boxes of 128 and 64 columns: Q K^T takes 3/4 of head dim 256's products (m64n64k16 at the
    shipped BLOCK_N 64). Padded to 256 (the old form, its K zeroed in registers) it took all of them, and ran as slow
    as 256 (docs/kernel.md)."""
    module = import_from_folder()
    assert module._launch.SM90_CONFIGS[256].kwargs["BLOCK_N"] == 64

    def products(qk: int, v_dim: int) -> int:
        ptx = _forward_ptx(module, qk, v_dim)
        assert "mma.sync" not in ptx
        return len(re.findall(r"wgmma\.mma_async\S*\.m64n64k16", ptx))

    assert 4 * products(192, 128) == 3 * products(256, 256)


def test_the_192_wide_backward_multiplies_192_columns_not_256():
    """The dK/dV pass at q/k 192 holds Q, K and dK as 128 + 64 columns: fewer wgmma instructions than the same tiles
    at q/k 256 (v 128 both). Padded to 256 (the old form) it issued exactly as many."""
    module = import_from_folder()
    config = module.backward._backward.CONFIGS[192]

    def products(qk: int) -> int:
        constants = {"HEAD_DIM": 256, "HEAD_DIM_QK": qk, "HEAD_DIM_V": 128, "GROUP": 1, "CAUSAL": True,
                     "BLOCK_M": config.dkdv_m, "BLOCK_N": config.dkdv_n, "EVEN_M": True}
        ptx = _build(module.backward._backward_kernels.flash_attn_triton_bwd_dkdv, constants, config.warps,
                     config.stages).asm["ptx"]
        return len(re.findall(r"wgmma\.mma_async", ptx))

    assert 0 < products(192) < products(256)


def test_the_192_forward_feeds_k_to_the_tensor_cores_from_shared_memory_as_256_does():
    """q/k 192 in one 256-wide box needed its padded columns zeroed on every key block, which took K from shared
    memory through registers and back (33 shared-memory reads against 256's 1, Triton 3.6 and 3.9): its two boxes
    (128 + 64 columns) go to wgmma as TMA wrote them."""
    module = import_from_folder()
    assert _forward_ptx(module, 192, 128).count("ld.shared") <= _forward_ptx(module, 256, 256).count("ld.shared")


def test_the_192_dq_pass_multiplies_the_heads_columns_only():
    """dQ and K of q/k 192 as 128 + 64 columns: fewer tensor-core instructions than q/k 256 with the same v 128, which
    a padded 256-wide tile of 192 matched instruction for instruction (its 64 zero columns multiplied too)."""
    module = import_from_folder()
    config = module.backward._backward.CONFIGS[192]
    counts = []
    for qk in (192, 256):
        constants = {"HEAD_DIM": 256, "HEAD_DIM_QK": qk, "HEAD_DIM_V": 128, "GROUP": 1, "CAUSAL": True,
                     "BLOCK_M": config.dq_m, "BLOCK_N": config.dq_n, "KV_STRIDE_SHARED": True}
        ptx = _build(module.backward._backward_kernels.flash_attn_triton_bwd_dq, constants, config.warps,
                     config.stages).asm["ptx"]
        counts.append(ptx.count("wgmma.mma_async.sync"))
    assert counts[0] < counts[1]


@pytest.mark.parametrize("qk, v_dim, reduces", [(256, 256, 1), (192, 128, 2)])
def test_the_wide_single_pass_adds_dq_by_one_tma_reduce_a_part(qk, v_dim, reduces):
    """The atomic single pass at the wide head dims: dQ's share goes to memory as one TMA reduce per part of the
    head (192: 128 + 64 columns, two; 256: one), never by element-wise atomics, and its tiles fit sm_90's shared
    memory (232,448 bytes)."""
    module = import_from_folder()
    config = module.backward._backward_single.CONFIGS[qk]
    constants = {"HEAD_DIM": 256, "HEAD_DIM_QK": qk, "HEAD_DIM_V": v_dim, "GROUP": 1, "CAUSAL": True,
                 "BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "EVEN_M": True, "DQ_TMA": True}
    kernel = _build(module.backward._backward_atomic_kernels.flash_attn_triton_bwd_single, constants, config.warps,
                    config.stages)
    ptx = kernel.asm["ptx"]
    assert len(re.findall(r"cp\.reduce\.async\.bulk\.tensor", ptx)) == reduces
    assert not re.search(r"\b(atom|red)\.global", ptx)  # ("shared.global", a copy's, is no atomic)
    assert kernel.metadata.shared <= 232448


@pytest.mark.parametrize("qk, v_dim, reduces", [(256, 256, 1), (192, 128, 2), (128, 128, 1)])
def test_the_masked_single_pass_adds_dq_by_tma_reduces_and_the_two_passes_by_none(qk, v_dim, reduces):
    """The masked dK/dV pass with ATOMIC_DQ: its dQ shares go out as one TMA reduce per part of the head, never as
    element-wise atomics; without it (the two-pass backward, its defaults) no reduce at all."""
    module = import_from_folder()
    config = module.backward.masked_backward.CONFIGS[qk]
    shared = {"HEAD_DIM": 1 << (qk - 1).bit_length(), "HEAD_DIM_QK": qk, "HEAD_DIM_V": v_dim, "GROUP": 1,
              "BOTTOM_RIGHT": True, "SOFTCAP": False, "BLOCK_M": 32, "BLOCK_N": 64}
    kernel = module.backward._masked_backward_kernels.flash_attn_triton_bwd_dkdv_masked
    single = _build(kernel, {**shared, "ATOMIC_DQ": True, "DQ_TMA": True}, config.dkdv_warps, config.dkdv_stages)
    two_pass = _build(kernel, {**shared, "dQacc": None, "ATOMIC_DQ": False, "DQ_TMA": False}, config.dkdv_warps,
                      config.dkdv_stages)
    assert len(re.findall(r"cp\.reduce\.async\.bulk\.tensor", single.asm["ptx"])) == reduces
    assert not re.search(r"\b(atom|red)\.global", single.asm["ptx"]) and single.metadata.shared <= 232448
    assert "cp.reduce.async.bulk.tensor" not in two_pass.asm["ptx"]
