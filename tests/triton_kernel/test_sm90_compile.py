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
                 "SOFTCAP": False, "HAS_SINK": False, "PAGED": paged, "TMA": tma}
    kernel = _build(decode.flash_attn_triton_decode_split, constants, 4, 2)
    assert ("cp.async.bulk.tensor" in kernel.asm["ptx"]) == tma  # K and V come by TMA copies or not at all


@pytest.mark.parametrize("qk, v_dim", [(256, 256), (192, 128)])
def test_the_wide_backwards_dkdv_pass_compiles_to_hoppers_wgmma(qk, v_dim):
    """The shipped wide tiles (_backward.CONFIGS) give a dK/dV program 64 keys: 32 compiled its products to Ampere's
    mma.sync, and ran 1.3-1.8x slower on an H100 (docs/kernel.md, session 19)."""
    module = import_from_folder()
    config = module.backward._backward.CONFIGS[qk]
    constants = {"HEAD_DIM": 256, "HEAD_DIM_QK": qk, "HEAD_DIM_V": v_dim, "GROUP": 1, "CAUSAL": True,
                 "BLOCK_M": config.dkdv_m, "BLOCK_N": config.dkdv_n, "EVEN_M": True}
    ptx = _build(module.backward._backward_kernels.flash_attn_triton_bwd_dkdv, constants, config.warps,
                 config.stages).asm["ptx"]
    assert "wgmma.mma_async" in ptx and "mma.sync" not in ptx


def _qk_products(qk: int, v_dim: int) -> int:
    """wgmma instructions of the dense forward's Q K^T (BLOCK_N keys wide: m64n64k16 at the shipped 64) at these
    head dims, causal, at the configuration the launch picks."""
    module = import_from_folder()
    config = module._launch.SM90_CONFIGS[256]
    constants = {"HEAD_DIM": 256, "HEAD_DIM_QK": qk, "HEAD_DIM_V": v_dim, "GROUP": 1, "CAUSAL": True,
                 "EVEN_N": True, "HEAD_GROUP": 1, **config.kwargs}
    ptx = _build(module.forward._forward.flash_attn_triton_fwd, constants, config.num_warps,
                 config.num_stages).asm["ptx"]
    assert config.kwargs["BLOCK_N"] == 64 and "mma.sync" not in ptx
    return len(re.findall(r"wgmma\.mma_async\S*\.m64n64k16", ptx))


def test_the_192_wide_forward_multiplies_192_columns_not_256():
    """q/k 192 is read as boxes of 128 and 64 columns: Q K^T takes 3/4 of head dim 256's products. Padded to 256
    (the old form, its K zeroed in registers) it took all of them, and ran as slow as 256 (docs/kernel.md)."""
    assert 4 * _qk_products(192, 128) == 3 * _qk_products(256, 256)


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
