"""runner.variant_args: the one place a variant's inputs are laid out, for the timed pass, the profiled pass
and the ncu child alike (which used to transpose its own and missed the training step's leaves)."""

from __future__ import annotations

import torch

from attnprof import variants
from attnprof.harness.runner import variant_args
from attnprof.problem import Problem, make_inputs


def _bshd() -> variants.Variant:
    return next(v for v in variants.REGISTRY.values() if v.layout == "BSHD")


def test_a_bshd_variant_gets_its_layout_and_a_bhsd_one_the_inputs_themselves():
    problem = Problem(batch=1, heads=2, seq=8, head_dim=4)
    inputs = make_inputs(problem, "cpu")
    laid = variant_args(_bshd(), problem, inputs)
    assert [t.shape for t in laid] == [t.transpose(1, 2).shape for t in inputs]
    assert all(torch.equal(a, b.transpose(1, 2)) for a, b in zip(laid, inputs, strict=True))
    assert variant_args(variants.get("naive"), problem, inputs) is inputs


def test_a_training_steps_inputs_are_leaves_of_their_own_over_the_same_memory():
    problem = Problem(batch=1, heads=2, seq=8, head_dim=4, mode="train")
    inputs = tuple(t.requires_grad_() for t in make_inputs(problem, "cpu"))
    laid = variant_args(variants.get("naive"), problem, inputs)
    assert all(a is not b and a.data_ptr() == b.data_ptr() for a, b in zip(laid, inputs, strict=True))
