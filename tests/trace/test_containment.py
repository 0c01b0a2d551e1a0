"""The op nesting on arrays (trace.containment) gives the stack walk's answer exactly, or declines."""

from __future__ import annotations

import random

import pytest

from attnprof.analysis.attribution import analyze_trace
from attnprof.trace import nesting
from attnprof.trace.reader import Event, load
from support import H200


def _random_ops(rng: random.Random, n: int, overlap: bool) -> list[Event]:
    """Nested spans on two threads: children inside parents, some sharing the parent's start or end, some
    of zero length, siblings apart by more than EPS; with `overlap`, a few reach past their parent's end."""
    ops: list[Event] = []

    def spans(lo: float, hi: float, tid: int, depth: int) -> None:
        t = lo
        while len(ops) < n and t < hi and depth < 12:
            a = t if rng.random() < 0.3 else round(rng.uniform(t, hi), 3)
            b = hi if rng.random() < 0.2 else round(rng.uniform(a, hi), 3)
            if overlap and rng.random() < 0.03:
                b = round(b + rng.uniform(0.5, 50), 3)
            ops.append(Event(name="aten::x", cat="cpu_op", ph="X", ts=a, dur=round(b - a, 3), pid=7, tid=tid))
            if rng.random() < 0.6:
                spans(a, min(b, hi), tid, depth + 1)
            t = round(b + rng.choice([0.002, rng.uniform(0.002, 3)]), 3)  # apart by more than EPS

    for tid in (1, 2):
        spans(0.0, 1e5, tid, 0)
    return nesting.nesting_order(ops)


@pytest.mark.parametrize("seed", range(12))
def test_the_arrays_nest_as_the_walk_does_or_decline(seed):
    order = _random_ops(random.Random(seed), 600, overlap=seed % 3 == 0)
    walked = nesting._walk(order)
    found = nesting._nest_by_containment(order)
    if found is None:
        assert not walked[3]  # declined only where the walk sees a partial overlap
    else:
        assert found == walked


def test_the_arrays_nest_a_recorded_training_step_as_the_walk_does():
    a = analyze_trace(load(H200 / "train_4_16_1024_64_bf16_naive.json.gz"))
    for fwd in a.forwards:
        order = nesting.nesting_order(fwd.cpu_ops)
        assert nesting._nest_by_containment(order) == nesting._walk(order)
