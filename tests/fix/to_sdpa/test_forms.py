"""The attention forms real projects write (forms/: each written here, named after the project and form it
reproduces), in fp32 and bf16: each gets its expected verdict, and every rewrite is re-checked here in
float64, independently of attnprof's own check: both modules cast to double with the same weights, the
outputs and every gradient (inputs and parameters) equal to a summation-order tolerance, on the factory's
inputs and on the form's `hostile(inputs)` ones (a fully padded sample, a query shorter than the keys).

Each form's docstring starts with `rewritten: <text in the call>` or `refused: <text in the reason>`."""

from __future__ import annotations

import contextlib
import io
from dataclasses import replace
from pathlib import Path
from unittest import mock

import pytest
import torch

from attnprof.fix.edits import patched_sources
from attnprof.fix.target import load_target
from attnprof.fix.to_sdpa.plan import plan

FORMS = Path(__file__).parent / "forms"
NAMES = sorted(p.stem for p in FORMS.glob("*.py"))
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def expectation(name: str) -> tuple[str, str]:
    first = (FORMS / f"{name}.py").read_text().split("\n", 1)[0].strip('"')
    verdict, _, words = first.partition(": ")
    return verdict, words.strip()


def cast(value, dtype):
    if torch.is_tensor(value) and value.is_floating_point():
        return value.to(dtype)
    if isinstance(value, (tuple, list)):
        return type(value)(cast(v, dtype) for v in value)
    if isinstance(value, dict):
        return {k: cast(v, dtype) for k, v in value.items()}
    return value


def planned(name: str, dtype: torch.dtype):
    target = load_target(f"{FORMS / name}.py:make")
    return plan(replace(target, fn=target.fn.to(dtype), inputs=cast(target.inputs, dtype)))


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name", NAMES)
def test_each_form_gets_its_verdict_and_every_rewrite_is_equal_in_float64(name, dtype):
    verdict, words = expectation(name)
    rewrites = planned(name, dtype)
    assert rewrites, "no attention chain found"
    if verdict == "refused":
        assert not any(r.safe for r in rewrites), [r.call for r in rewrites]
        assert words in rewrites[0].reason, rewrites[0].reason
        return
    assert verdict == "rewritten"
    assert [r.safe for r in rewrites] == [True], [r.reason for r in rewrites]
    assert words in rewrites[0].call, rewrites[0].call
    edits = [e for r in rewrites for e in r.edits]
    (old, new), = patched_sources(edits).values()
    assert_only_the_chain_changed(old, new, {n for e in edits if not e.text for n in range(e.span[0], e.span[2])})
    assert_equal_in_float64(name, old, new)


def assert_only_the_chain_changed(old: str, new: str, deleted: set[int]) -> None:
    """Every comment (a licence header too) outside the statements the rewrite removes stays byte for byte."""
    lines = io.StringIO(new, newline="").readlines()
    for n, line in enumerate(io.StringIO(old, newline="").readlines(), 1):
        if line.lstrip().startswith("#") and n not in deleted:
            assert line in lines, line


def assert_equal_in_float64(name: str, old: str, new: str) -> None:
    spec = f"{FORMS / name}.py:make"
    before, after = load_target(spec, source=old), load_target(spec, source=new)
    after.fn.load_state_dict(before.fn.state_dict())
    modules = [m.double().eval() for m in (before.fn, after.fn)]
    hostile = getattr(before, "hostile", None) or _module_of(before).__dict__.get("hostile", lambda i: [])
    for inputs in [before.inputs, *hostile(before.inputs)]:
        with float64_world():
            want, got = (_run(m, cast(inputs, torch.float64)) for m in modules)
        assert len(want) == len(got)
        for a, b in zip(want, got, strict=True):
            torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-12)


@contextlib.contextmanager
def float64_world():
    """An explicit upcast to fp32 (`scores.float()`, `softmax(..., dtype=torch.float32)`) means "at least
    fp32": on float64 tensors it keeps float64, so the original is as exact as the rewrite."""
    def keep(fn):
        def call(x, *args, **kwargs):
            if torch.is_tensor(x) and x.dtype == torch.float64 and kwargs.get("dtype") == torch.float32:
                kwargs["dtype"] = torch.float64
            return fn(x, *args, **kwargs)
        return call

    upcast = torch.Tensor.float
    with mock.patch.object(torch.Tensor, "float", lambda t, *a, **k: t if t.dtype == torch.float64 else upcast(t)), \
            mock.patch.object(torch.nn.functional, "softmax", keep(torch.nn.functional.softmax)), \
            mock.patch.object(torch, "softmax", keep(torch.softmax)):
        yield


def _module_of(target):
    import sys

    return sys.modules[type(target.fn).__module__]


def _run(module, inputs) -> list:
    leaves = tuple(t.detach().clone().requires_grad_(True) if torch.is_tensor(t) and t.is_floating_point() else t
                   for t in inputs)
    module.zero_grad(set_to_none=True)
    out = module(*leaves)
    out = out[0] if isinstance(out, tuple) else out
    out.backward(torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out))
    grads = [t.grad for t in leaves if torch.is_tensor(t) and t.requires_grad]
    return [out.detach(), *grads, *(p.grad for p in module.parameters() if p.grad is not None)]
