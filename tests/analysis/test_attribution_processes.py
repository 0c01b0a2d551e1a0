"""Counting that two processes in one trace, or a region inside one of its own name, cannot fool.

Each process numbers its correlation ids from 1, so a trace holding two (merged ranks, a DataLoader
worker) repeats every id; a recursive module opens its region again inside its own forward."""

from __future__ import annotations

import gzip
import json

import pytest

from attnprof.analysis.attribution import analyze_trace, per_forward
from attnprof.pipeline.one_trace import analyze_path
from attnprof.trace.reader import Args, Event, Trace
from support import h200_trace


def ev(name: str, cat: str, ts: float, dur: float, pid=1, tid=1, corr: int | None = None) -> Event:
    return Event(name, cat, "X", ts, dur, pid, tid, Args(correlation=corr) if corr is not None else None)


def process(pid: int, gpu: int, offset: float = 0.0, forwards: int = 3, kernels: int = 3) -> list[Event]:
    """`forwards` regions of one process, each launching `kernels` kernels on GPU lane `gpu`; ids from 1."""
    events, corr = [], 0
    for f in range(forwards):
        t = offset + f * 100
        events.append(ev("fwd", "user_annotation", t, 90, pid=pid, tid=pid))
        for k in range(kernels):
            corr += 1
            events.append(ev("cudaLaunchKernel", "cuda_runtime", t + 10 + 10 * k, 2, pid=pid, tid=pid, corr=corr))
            events.append(ev(f"k{k}", "kernel", t + 15 + 10 * k, 3, pid=gpu, tid=7, corr=corr))
    return events


def counts(events: list[Event]) -> list[int]:
    a = analyze_trace(Trace("test", events), "fwd")
    return [len(f.activities) for f in a.forwards]


def test_two_processes_with_the_same_correlation_ids_each_keep_their_gpu_work():
    assert counts(process(100, gpu=0) + process(200, gpu=1, offset=1000)) == [3] * 6


def test_two_processes_on_one_gpu_at_the_same_moments_still_count_exactly():
    both = process(100, gpu=0) + process(200, gpu=0)  # every id, every time stamp repeated
    a = analyze_trace(Trace("test", both), "fwd")
    assert [len(f.activities) for f in a.forwards] == [3] * 6
    for f in a.forwards:
        assert {act.launch.pid for act in f.activities} == {f.region.pid}
    assert (a.orphans, a.outside) == (0, 0)


def test_interleaved_processes_match_each_kernel_to_its_own_launch():
    a = analyze_trace(Trace("test", process(100, gpu=0) + process(200, gpu=0, offset=50)), "fwd")
    for f in a.forwards:
        assert len(f.activities) == 3 and {act.launch.pid for act in f.activities} == {f.region.pid}


def test_a_recorded_trace_merged_with_a_second_process_counts_like_itself(tmp_path):
    doc = json.loads(gzip.decompress(h200_trace("naive").read_bytes()))
    host = {e["pid"] for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime"}
    twin = [{**e, "pid": e["pid"] + 1} if e.get("pid") in host else dict(e) for e in doc["traceEvents"]]
    merged = tmp_path / "merged.json"
    merged.write_text(json.dumps({**doc, "traceEvents": doc["traceEvents"] + twin}))
    alone = analyze_path(h200_trace("naive"))
    both = analyze_path(merged)
    assert both["forwards"] == 2 * alone["forwards"]
    assert both["per_forward"]["gpu_ops"] == alone["per_forward"]["gpu_ops"] == 7
    counts = ("orphans", "outside_regions", "attributed", "gpu_activities")
    assert {k: both["unattributed"][k] for k in counts} == {k: 2 * alone["unattributed"][k] for k in counts}
    assert both["unattributed"]["region_share"] == alone["unattributed"]["region_share"]
    for key in ("attributed_us", "outside_us", "orphans_us"):
        assert both["unattributed"][key] == pytest.approx(2 * alone["unattributed"][key], abs=1e-3)


def recursive_forward(t: float, corr: int) -> list[Event]:
    """A module whose forward calls itself once: region fwd { launch; fwd { launch }; launch }."""
    return [ev("fwd", "user_annotation", t, 100), ev("fwd", "user_annotation", t + 30, 40),
            ev("cudaLaunchKernel", "cuda_runtime", t + 10, 2, corr=corr), ev("k", "kernel", t + 12, 3, 0, 7, corr),
            ev("cudaLaunchKernel", "cuda_runtime", t + 40, 2, corr=corr + 1),
            ev("k", "kernel", t + 42, 3, 0, 7, corr + 1),
            ev("cudaLaunchKernel", "cuda_runtime", t + 80, 2, corr=corr + 2),
            ev("k", "kernel", t + 82, 3, 0, 7, corr + 2)]


def test_a_region_inside_one_of_its_own_name_is_part_of_that_forward():
    events = recursive_forward(0, 1) + recursive_forward(200, 4) + recursive_forward(400, 7)
    a = analyze_trace(Trace("test", events), "fwd")
    assert [len(f.activities) for f in a.forwards] == [3, 3, 3]
    assert per_forward(a)["gpu_ops"] == 3


def test_same_name_regions_on_other_threads_stay_forwards_of_their_own():
    events = [ev("fwd", "user_annotation", 0, 100, tid=1), ev("fwd", "user_annotation", 10, 50, tid=2),
              ev("cudaLaunchKernel", "cuda_runtime", 20, 2, tid=2, corr=1), ev("k", "kernel", 25, 3, 0, 7, 1)]
    assert counts(events) == [0, 1]
