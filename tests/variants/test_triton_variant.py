"""The `triton` variant: what it refuses and why, and (under Triton's interpreter, in a fresh process)
that what it builds matches attnprof's float64 reference for a forward, GQA, decode calls, a sliding
window and documents."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnprof import variants
from attnprof.problem import Problem
from attnprof.variants import triton as triton_variant
from support import FP16_TOLERANCE, run_interpreted

SCRIPT = Path(__file__).with_name("interpreted_triton_variant.py")


def test_triton_is_a_registered_variant():
    assert variants.get("triton").family == "triton"


@pytest.mark.parametrize("problem, says", [
    (Problem(dtype="fp32"), "bf16 or fp16"),
    (Problem(head_dim=96), "head dims 64, 128 and 256, not 96"),
    (Problem(mode="decode", seq=64, mask="document=16"), "not documents"),
    (Problem(dense_mask=True), "mask tensor"),
])
def test_problems_it_has_no_kernel_for_are_refused_with_the_reason(problem, says):
    pytest.importorskip("triton")
    assert says in triton_variant.supports_triton(problem, "cuda")


def test_head_dim_256_is_taken():
    pytest.importorskip("triton")
    assert triton_variant._refuses_problem(Problem(head_dim=256)) is None


def test_the_head_dims_it_takes_are_the_kernels():
    """The variant refuses head dims before loading the kernel (a plan costs no import); the list it refuses by must
    be the kernel's own."""
    pytest.importorskip("triton")
    from attnprof.kernels import import_from_folder

    assert triton_variant.HEAD_DIMS == import_from_folder()._head_tiles.HEAD_DIMS


def test_on_cpu_it_asks_for_the_interpreter(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert "TRITON_INTERPRET=1" in triton_variant.supports_triton(Problem(dtype="fp16"), "cpu")


def test_under_the_interpreter_it_refuses_bf16_and_large_problems(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert "fp16" in triton_variant.supports_triton(Problem(batch=1, heads=1, seq=16), "cpu")
    assert "too large" in triton_variant.supports_triton(Problem(dtype="fp16"), "cpu")
    assert triton_variant.supports_triton(Problem(batch=1, heads=2, seq=32, dtype="fp16"), "cpu") is None


def test_under_the_interpreter_it_matches_the_float64_reference():
    pytest.importorskip("triton")
    cases = run_interpreted(SCRIPT)
    assert set(cases) == {"forward", "gqa_no_mask", "decode", "decode_gqa_window", "window", "documents"}
    for name, result in cases.items():
        assert result["supported"], (name, result.get("reason"))
        assert result["shape"], name
        assert result["error"] < FP16_TOLERANCE, name


def test_the_triton_variant_is_a_default_on_sm90_only(monkeypatch):
    import torch

    assert {"naive", "sdpa-cudnn", "flex", "hub"} <= set(variants.names())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for capability, default in (((9, 0), True), ((8, 0), False), ((10, 0), False)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_, c=capability: c)
        assert ("triton" in variants.names()) is default, capability
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "triton" in variants.REGISTRY and "triton" not in variants.names()
