"""One rule for every cost: a finding's cost, an attention call's time and the forward's time are the median
over the same forwards, so one slow forward of three never gives a part larger than the forward it is in."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from attnprof.analysis.attribution import analyze_trace
from attnprof.findings import run_findings
from attnprof.findings.run_facts import RunFacts
from attnprof.pipeline.one_trace import analysis_dict
from attnprof.trace.reader import load
from support import cpu_trace, h200_trace

SLOW = 10.0  # the first profiled forward takes ten times as long, as a preempted one does on a busy machine


def one_slow_forward(source: Path, out: Path, factor: float = SLOW) -> Path:
    """`source` with its first profiler step stretched `factor` times (every event that starts in it: starts
    moved away from the step's start and durations scaled) and every later event moved by the added time."""
    trace = json.loads(gzip.decompress(source.read_bytes()))
    steps = sorted((e for e in trace["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    start, end = float(steps[0]["ts"]), float(steps[0]["ts"]) + float(steps[0]["dur"])
    added = (end - start) * (factor - 1)
    for e in trace["traceEvents"]:
        if "ts" not in e:
            continue
        ts = float(e["ts"])
        if start <= ts < end:
            e["ts"] = start + (ts - start) * factor
            if "dur" in e:
                e["dur"] = float(e["dur"]) * factor
        elif ts >= end:
            e["ts"] = ts + added
    _stretch_gpu(trace["traceEvents"], start, end, factor)
    out.write_bytes(gzip.compress(json.dumps(trace).encode()))
    return out


GPU = ("kernel", "gpu_memcpy", "gpu_memset")


def _stretch_gpu(events: list[dict], start: float, end: float, factor: float) -> None:
    """The GPU work the step's launches started (by correlation; the host events are already stretched, so
    the step spans `start` to `start + (end - start) * factor`), stretched the same way, later GPU work moved."""
    host_end = start + (end - start) * factor
    launched = {e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and "correlation" in (e.get("args") or {}) and start <= float(e["ts"]) <= host_end}
    mine = [e for e in events if e.get("cat") in GPU and (e.get("args") or {}).get("correlation") in launched]
    if not mine:
        return
    g0 = min(float(e["ts"]) for e in mine)
    g1 = max(float(e["ts"]) + float(e.get("dur", 0)) for e in mine)
    for e in events:
        if e.get("cat") not in GPU:
            continue
        if e in mine:
            e["ts"], e["dur"] = g0 + (float(e["ts"]) - g0) * factor, float(e.get("dur", 0)) * factor
        elif float(e["ts"]) >= g1:
            e["ts"] = float(e["ts"]) + (g1 - g0) * (factor - 1)


@pytest.mark.parametrize("where", ["cpu:sdpa-math", "cpu:naive", "h200:sdpa-math", "h200:naive"])
def test_no_part_exceeds_its_forward_with_one_slow_forward_of_three(tmp_path, where):
    kind, variant = where.split(":")
    source = cpu_trace(variant) if kind == "cpu" else h200_trace(variant)
    a = analyze_trace(load(one_slow_forward(source, tmp_path / "slow.json.gz")))
    assert len(a.forwards) == 3
    d = analysis_dict(a)
    forward = d["per_forward"]["gpu_time_us" if a.has_gpu else "cpu_time_us"]
    times = sorted(f.gpu_time_us if a.has_gpu else f.region.dur for f in a.forwards)
    assert times[-1] > 5 * times[1]  # the slow forward is slow, where the trace keeps its time
    assert forward == pytest.approx(times[1], abs=1e-3)  # the median forward, not the slow one
    assert d["attention_calls"], "the fixture has an attention call"
    for row in d["attention_calls"]:
        assert row["time_us_per_forward"] <= forward, row
        assert 0 < row["share"] <= 1, row
        lo, hi = row["time_us_spread"]
        assert lo <= row["time_us_per_forward"] <= hi
    for f in d["findings"]:
        assert f["cost_us"] <= forward, (f["id"], f["cost_us"], forward)
    step = d["model_step"]
    assert step["step_us"] == pytest.approx(forward, abs=1e-3)
    assert 0 < step["share"]["total"] <= 1
    assert all(row["time_us"] <= step["step_us"] for row in step["layers"])


def test_the_slow_forward_moves_no_cost_past_the_noise(tmp_path):
    """The medians of the stretched trace are those of the two usual forwards' range, where a mean would be
    pulled several times past the median forward by the one slow forward."""
    plain = analysis_dict(analyze_trace(load(cpu_trace("sdpa-math"))))
    slow = analysis_dict(analyze_trace(load(one_slow_forward(cpu_trace("sdpa-math"), tmp_path / "slow.json.gz"))))
    before, after = (next(f for f in d["findings"] if f["id"] == "safe-softmax") for d in (plain, slow))
    assert after["cost_us"] < 2 * before["cost_us"]  # a mean would be ~(10 + 1 + 1) / 3 = 4x
    call = slow["attention_calls"][0]
    assert call["time_us_per_forward"] < 2 * plain["attention_calls"][0]["time_us_per_forward"]


def test_every_share_of_the_profiled_call_is_at_most_the_whole_call(tmp_path):
    a = analyze_trace(load(one_slow_forward(cpu_trace("sdpa-math"), tmp_path / "slow.json.gz")))
    timing = {"device_us": {"median": 50.0, "method": "cpu-wall"}, "host_us": None, "cpu_bound": None}
    found = run_findings(a, facts=RunFacts(timing=timing))
    assert found
    for f in found:
        assert f["share_of_forward"] is not None and 0 <= f["share_of_forward"] <= 1, f


def test_gpu_time_per_forward_splits_the_activities_by_their_forward():
    import numpy as np

    from attnprof.analysis.attribution import all_gpu
    from attnprof.analysis.queries import each_forward
    from support import h200_trace

    a = analyze_trace(load(h200_trace("naive")))
    assert len(a.forwards) > 1
    each = each_forward(a, np.arange(len(all_gpu(a).dur)))
    assert each == pytest.approx([sum(f.gpu.dur.tolist()) for f in a.forwards])


def test_memory_bounds_time_and_cost_are_the_median_forwards(tmp_path):
    """The decode call's time, and its cost above the copy floor, are those of the median forward: with one
    forward ten times as slow a mean would put the call at ~4x its usual time, over the forward's median."""
    from attnprof.findings import memory_bound
    from support import H200

    source = H200 / "decode_8_32_8_8192_128_bf16_flex.json.gz"
    ceiling = RunFacts(copy_bytes_per_s=4.24e12)
    [plain] = memory_bound.check(analyze_trace(load(source)), ceiling)
    slow_trace = analyze_trace(load(one_slow_forward(source, tmp_path / "slow.json.gz")))
    [slow] = memory_bound.check(slow_trace, ceiling)
    forward = analysis_dict(slow_trace)["per_forward"]["gpu_time_us"]
    assert slow["evidence"]["time_us"] <= forward and slow["cost_us"] <= forward
    assert slow["evidence"]["time_us"] < 1.5 * plain["evidence"]["time_us"]
    assert [r["time_us"] for r in slow["evidence"]["calls"]] == [slow["evidence"]["time_us"]]


def test_the_rings_merge_kernels_are_timed_by_the_median_instance(tmp_path):
    """cp-merge-overhead's kernels and a rank summary's (one computation, analysis.comm.top_merge_kernels):
    each kernel's time per step is the median step's, as the rule's cost is, not pulled up by a slow step."""
    from attnprof.analysis.distributed import rank_facts
    from synthetic_ranks import MERGE_US, rank_trace

    source = tmp_path / "rank0.json.gz"
    source.write_bytes(gzip.compress(json.dumps(rank_trace(0, 2)).encode()))
    a = analyze_trace(load(one_slow_forward(source, tmp_path / "slow.json.gz")))
    [merge] = [f for f in run_findings(a) if f["id"] == "cp-merge-overhead"]
    assert merge["cost_us"] == pytest.approx(MERGE_US)
    top = merge["evidence"]["top_kernels"]
    assert sum(k["us_per_instance"] for k in top) == pytest.approx(MERGE_US)  # a mean would be ~4x
    assert rank_facts(a, a.trace, source)["merge_kernels"] == top
