"""Forward and backward inside a training step: each GPU activity (and host op) goes to the phase of the
thread work that launched it; an independent count from the raw JSON agrees."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnprof import analyze
from support import CPU, H200

TRAIN_H200 = sorted(H200.glob("train_*.json.gz"))
BACKWARD = "autograd::engine::evaluate_function: "


def count_by_phase(path) -> tuple[int, int]:
    """Plain json: GPU activities per step by phase, the launch inside an evaluate_function op on its own
    thread meaning backward (medians over the steps)."""
    with gzip.open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "user_annotation"
             and e["name"] == "attn_step"]
    nodes = [(e["tid"], e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith(BACKWARD)]
    launch = {e["args"]["correlation"]: e for e in events
              if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    per = Counter()
    for e in events:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        at = launch.get(e["args"].get("correlation"))
        step = next((i for i, (lo, hi) in enumerate(steps) if at and lo <= at["ts"] <= hi), None)
        if step is not None:
            back = any(t == at["tid"] and lo <= at["ts"] and at["ts"] + at["dur"] <= hi for t, lo, hi in nodes)
            per[(step, back)] += 1
    median = lambda xs: sorted(xs)[(len(xs) - 1) // 2]  # noqa: E731
    return (median([per[(i, False)] for i in range(len(steps))]), median([per[(i, True)] for i in range(len(steps))]))


@pytest.mark.parametrize("path", TRAIN_H200, ids=lambda p: p.name)
def test_h200_training_steps_split_by_the_autograd_thread(path):
    d = analyze(path)
    fwd, bwd = d["phases"]["forward"], d["phases"]["backward"]
    assert d["unit"] == "step" and (fwd["gpu_ops"], bwd["gpu_ops"]) == count_by_phase(path)
    assert bwd["gpu_ops"] > 0 and fwd["gpu_ops"] > 0
    assert fwd["gpu_ops"] == fwd["kernels"] + fwd["memcpy"] + fwd["memset"]
    assert d["per_forward"]["gpu_ops"] == fwd["gpu_ops"] + bwd["gpu_ops"]
    # medians over the steps, of each phase and of the whole: close, not equal
    assert fwd["gpu_time_us"] + bwd["gpu_time_us"] == pytest.approx(d["per_forward"]["gpu_time_us"], rel=0.02)


def test_a_cpu_training_step_has_a_backward_phase_of_host_ops():
    d = analyze(CPU / "train_1_2_64_32_bf16_naive.json.gz")
    fwd, bwd = d["phases"]["forward"], d["phases"]["backward"]
    assert d["unit"] == "step" and fwd["gpu_ops"] is None and bwd["gpu_ops"] is None
    assert bwd["aten_ops"] > 0 and fwd["aten_ops"] > 0
    assert fwd["aten_ops"] + bwd["aten_ops"] == d["per_forward"]["aten_ops"]
    assert 0 < bwd["cpu_time_us"] < d["per_forward"]["cpu_time_us"]


def test_a_forward_has_no_phases():
    d = analyze(H200 / "8_16_1024_64_bf16_naive.json.gz")
    assert d["unit"] == "forward" and d["phases"] is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 12), st.integers(1, 2)), max_size=30))
def test_the_outermost_backward_spans_are_those_a_walk_keeps(rows):
    """Per thread by start (the longer first): a span is kept when it starts after the last kept one ended."""
    from attnprof.analysis.columns import spans_of
    from attnprof.analysis.phases import _outermost
    from attnprof.trace.reader import Event

    ops = [Event(f"n{i}", "cpu_op", "X", float(ts), float(dur), 1, tid) for i, (ts, dur, tid) in enumerate(rows)]
    cols = spans_of(ops)
    want: dict[int, list[int]] = {}
    reach: dict[int, float] = {}
    for i in sorted(range(len(ops)), key=lambda i: (ops[i].ts, -ops[i].dur)):
        t = ops[i].tid
        if t not in reach or ops[i].ts > reach[t]:
            reach[t] = ops[i].ts + ops[i].dur + 1e-3
            want.setdefault(t, []).append(i)
    assert _outermost(cols).tolist() == [i for kept in want.values() for i in kept]
