"""The Gluon forward's skip_above configurations (_hopper_launch.HopperConfig): a consumer warpgroup releases the
key blocks wholly above its rows unread. Such a block adds exactly nothing (P = exp2(-inf) = 0, alpha = 1), so
the output and the LSE must be bit-identical to the configuration that computes it."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnprof.kernels import import_from_folder  # noqa: E402

SKIPPING = {"two_per_sm_n64_s2_skip": "two_per_sm_n64_s2", "two_per_sm_n64_s3_skip": "two_per_sm_n64_s3"}


def _hopper_launch():
    return sys.modules[import_from_folder().__name__ + ".forward._hopper_launch"]


def test_each_skipping_configuration_differs_from_its_reference_only_by_skipping():
    configs = _hopper_launch().CONFIGS
    for skipping, reference in SKIPPING.items():
        assert configs[skipping] == configs[reference]._replace(skip_above=True)
        assert not configs[skipping].pingpong  # the ping-pong turns need every block from both consumers


@pytest.mark.parametrize("config", list(SKIPPING))
def test_a_skipping_configuration_compiles_for_sm90_two_programs_an_sm_without_local_memory(config):
    pytest.importorskip("triton.experimental.gluon.nvidia.hopper")
    kernel = _hopper_launch().compile_for_sm90(64, True, "bf16", config)
    ptx = kernel.asm["ptx"]
    assert ".maxnreg 80" in ptx and "ld.local" not in ptx and "st.local" not in ptx
    assert kernel.metadata.shared * 2 <= 232448  # two programs an SM: each within half an H200 SM's 227 KiB


@pytest.mark.cuda
@pytest.mark.parametrize("config", list(SKIPPING))
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("batch, heads, kv_heads, seq", [(8, 16, 16, 1024), (1, 8, 2, 512), (2, 3, 3, 128)])
def test_on_the_gpu_skipping_gives_the_bits_of_the_configuration_that_computes_the_blocks(
        monkeypatch, config, causal, dtype, batch, heads, kv_heads, seq):
    module = import_from_folder()
    plans = sys.modules[module.__name__ + ".forward._forward_plans"]
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(batch, heads, seq, 64, generator=gen).to(dtype).cuda()
    k, v = (torch.randn(batch, kv_heads, seq, 64, generator=gen).to(dtype).cuda() for _ in range(2))
    results = []
    for name in (SKIPPING[config], config):
        monkeypatch.setattr(_hopper_launch(), "BY_SIZE", {64: ((0, name),), 128: ()})
        monkeypatch.setattr(_hopper_launch(), "TRAINING_LEAST", {})
        monkeypatch.setattr(plans, "_FORWARD_PLANS", {})
        for _ in range(2):  # the first call, then its plan's
            torch.full_like(q, float("nan"))  # freed at once: an output row left unwritten likely reads NaN
            results.append(plans.forward(q, k, v, causal=causal, sm_scale=64**-0.5, causal_off=0))
    (out_ref, lse_ref), _, (out, lse), (out_planned, lse_planned) = results
    assert not out.isnan().any()
    assert torch.equal(out, out_ref) and torch.equal(lse, lse_ref)
    assert torch.equal(out_planned, out_ref) and torch.equal(lse_planned, lse_ref)
