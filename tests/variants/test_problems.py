"""Every registered variant (the registry's, so a new one is checked without an edit here) takes every
problem it can (GQA, masks, decode, training steps) and gets it right; what it cannot take is refused with
the reason (torch's words when torch refuses)."""

from __future__ import annotations

import pytest

from attnprof.harness.steps import training_step
from attnprof.problem import Problem, make_inputs, reference_output
from attnprof.variants import REGISTRY, get, why_not
from attnprof.variants.base import BuildOptions, VariantUnavailable
from attnprof.variants.hub import flash_kwargs

PROBLEMS = {
    "causal": {}, "gqa": dict(heads=4, kv_heads=2), "mqa decode": dict(heads=4, kv_heads=1, mode="decode"),
    "decode q=3": dict(heads=2, mode="decode", q_len=3), "no mask": dict(mask="none"),
    "dense window": dict(mask="window=8", dense_mask=True), "dense documents": dict(mask="document=8", dense_mask=True),
    "dense causal decode": dict(mode="decode", q_len=4, dense_mask=True),
}


TOLERANCE = {"fp32": 1e-4, "bf16": 3e-2}  # against float64, per element; a variant gets the first it takes


def runnable(name: str, **shape) -> Problem:
    """The problem in the first dtype `name` takes on this CPU; skipped, with its reason, where it takes none
    (a refusal that says why is right: `list` and `run` show the same reason)."""
    reason = None
    for dtype in TOLERANCE:
        problem = Problem(**{"batch": 2, "heads": 2, "seq": 32, "head_dim": 16, "dtype": dtype, **shape})
        reason = why_not(REGISTRY[name], problem, "cpu")
        if reason is None:
            return problem
    assert reason.strip()
    pytest.skip(f"{name} runs no such problem here: {reason}")


def built(name: str, problem: Problem):
    try:
        return get(name).build(problem, "cpu", BuildOptions())
    except VariantUnavailable as e:  # refused at build time: it must say why
        assert str(e).strip()
        pytest.skip(f"{name}: {e}")


@pytest.mark.parametrize("name", list(REGISTRY))
@pytest.mark.parametrize("shape", PROBLEMS)
def test_every_registered_variant_matches_the_float64_reference(name, shape):
    import torch

    problem = runnable(name, **PROBLEMS[shape])
    q, k, v = make_inputs(problem, "cpu")
    forward = built(name, problem)
    with torch.no_grad():
        out = forward(q, k, v)
    assert out.shape == q.shape
    assert (out.double() - reference_output(q, k, v, problem)).abs().max() < TOLERANCE[problem.dtype]


def test_sdpa_is_told_what_sdpa_cannot_take():
    problem = Problem(batch=1, heads=2, seq=32, head_dim=16, mask="window=8")
    with pytest.raises(VariantUnavailable, match="--dense-mask"):
        get("sdpa-math").build(problem, "cpu", BuildOptions())


def test_flash_attn_gets_a_window_and_refuses_documents_and_mask_tensors():
    assert flash_kwargs(Problem(seq=64, mask="window=16"), "fa2") == {"causal": True, "window_size": (15, 0)}
    assert flash_kwargs(Problem(seq=64, mask="none"), "fa2") == {"causal": False}
    for kwargs in ({"mask": "document=16"}, {"dense_mask": True}):
        with pytest.raises(VariantUnavailable, match="takes no"):
            flash_kwargs(Problem(seq=64, **kwargs), "fa2")


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_registered_variant_gives_the_gradients_of_the_reference(name):
    import torch

    problem = runnable(name, batch=1, heads=4, kv_heads=2, seq=16, head_dim=8, mode="train")
    if problem.dtype != "fp32":
        pytest.skip(f"{name} takes no fp32 here; its gradients are checked in float64 only")
    args = tuple(t.double().requires_grad_() for t in make_inputs(problem, "cpu"))
    grad_out = torch.randn_like(args[0])
    step = training_step(built(name, problem), args, grad_out)
    grads = {}
    hooks = [t.register_hook(lambda g, i=i: grads.__setitem__(i, g)) for i, t in enumerate(args)]
    step(*args)
    for h in hooks:
        h.remove()
    expected = torch.autograd.grad(reference_output(*args, problem), args, grad_out)
    assert sorted(grads) == [0, 1, 2]
    for i, g in enumerate(expected):
        assert (grads[i] - g).abs().max() < 1e-9
