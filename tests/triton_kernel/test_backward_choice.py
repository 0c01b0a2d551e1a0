"""Which backward runs: the Gluon kernel where _backward_hopper_launch.chosen takes the inputs, bit-identical
from run to run when a deterministic one is asked for (by the keyword or torch.use_deterministic_algorithms);
elsewhere the two-pass one by default, the single pass (atomic dQ) under FLASH_ATTN_TRITON_ATOMIC_DQ=1 unless
a deterministic one is asked for."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnprof.kernels import import_from_folder  # noqa: E402


@pytest.fixture
def chosen(monkeypatch):
    """run(deterministic, gluon=False) -> the backward that ran ("gluon deterministic" for the fixed-order one),
    the Gluon kernel made to take the inputs or not (gluon), or to fail to compile ("broken")."""
    ops = sys.modules[import_from_folder().__name__ + "._ops"]
    calls = []
    for name in ("single_pass", "two_pass"):
        strategy = getattr(ops, name)
        monkeypatch.setattr(strategy, "backward", lambda *a, name=name, **kw: calls.append(name) or a[:3])

    def run(deterministic: bool, gluon=False) -> str:
        monkeypatch.setattr(ops.hopper, "chosen", lambda *a: bool(gluon))
        monkeypatch.setattr(ops.hopper, "backward", lambda *a, deterministic, **kw: calls.append(
            "gluon deterministic" if deterministic else "gluon") or (None if gluon == "broken" else a[:3]))
        ops._run_bwd(*(torch.empty(1, 1, 1, 64),) * 6, True, 0.125, 0, deterministic)
        return calls[-1]

    return run


def test_the_two_pass_is_the_default_and_the_variable_picks_the_single_pass(chosen, monkeypatch):
    monkeypatch.delenv("FLASH_ATTN_TRITON_ATOMIC_DQ", raising=False)
    assert chosen(False) == "two_pass"
    monkeypatch.setenv("FLASH_ATTN_TRITON_ATOMIC_DQ", "1")
    assert chosen(False) == "single_pass"


def test_a_deterministic_request_keeps_the_two_pass_where_the_gluon_kernel_does_not_run(chosen, monkeypatch):
    monkeypatch.setenv("FLASH_ATTN_TRITON_ATOMIC_DQ", "1")
    assert chosen(True) == "two_pass"
    assert chosen(True, gluon="broken") == "two_pass"  # this Triton cannot compile it: never the atomic one
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert chosen(False) == "two_pass"
    finally:
        torch.use_deterministic_algorithms(previous)


def test_a_deterministic_request_makes_the_gluon_kernel_add_in_a_fixed_order(chosen, monkeypatch):
    monkeypatch.delenv("FLASH_ATTN_TRITON_ATOMIC_DQ", raising=False)
    assert chosen(False, gluon=True) == "gluon"
    assert chosen(True, gluon=True) == "gluon deterministic"
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert chosen(False, gluon=True) == "gluon deterministic"
    finally:
        torch.use_deterministic_algorithms(previous)


def test_the_backward_gets_no_zero_filled_gradient_for_the_lse(monkeypatch):
    """The LSE is not differentiable: materialising its zero gradient cost a fill kernel per step."""
    ops = sys.modules[import_from_folder().__name__ + "._ops"]
    seen = []
    monkeypatch.setattr(ops, "planned_forward", lambda q, k, v, **kw: (q * 1, q.new_zeros(q.shape[:3]), None))
    monkeypatch.setattr(ops, "_run_bwd", lambda dout, q, k, v, *rest: seen.append(dout) or (dout, None, None))
    q, k, v = (torch.randn(1, 1, 4, 64, requires_grad=True) for _ in range(3))
    out, _ = ops.attend(q, k, v, True, 0.125, 0)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out.sum().backward()
    assert len(seen) == 1 and torch.equal(q.grad, torch.ones_like(q))
    assert not [e for e in prof.events() if e.name in ("aten::zeros", "aten::zeros_like")]


def test_an_eager_backward_is_planned_on_its_forwards_plan_and_the_layout_of_its_output_gradient(monkeypatch):
    """The backward's plan key is the forward's plan (which fixes q, k, v, the output and the LSE) and dO's
    strides and alignment: a dO of another layout gets its own plan, the same layout the same one."""
    package = sys.modules[import_from_folder().__name__]
    ops, two_pass = package._ops, package.backward._backward
    keys = []
    monkeypatch.setattr(two_pass, "run_planned", lambda plans, key, launches, tensors: keys.append(key))
    forward_plan = object()
    monkeypatch.setattr(ops, "planned_forward", lambda q, k, v, **kw: (q * 1, q.new_zeros(q.shape[:3]), forward_plan))
    q, k, v = (torch.randn(1, 2, 64, 64, dtype=torch.float16, requires_grad=True) for _ in range(3))
    contiguous = torch.randn(1, 2, 64, 64, dtype=torch.float16)
    for dout in (contiguous, torch.randn_like(contiguous), contiguous.transpose(1, 2).contiguous().transpose(1, 2)):
        out, _ = ops.attend(q, k, v, True, 0.125, 0)
        torch.autograd.grad(out, (q, k, v), dout)
    assert [key[0] for key in keys] == [forward_plan] * 3
    assert keys[0] == keys[1] != keys[2]
