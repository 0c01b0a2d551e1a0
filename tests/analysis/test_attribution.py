"""Launch-correlation attribution, the host-op index, and that both stay fast on big traces."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pytest

from attnprof.analysis.attribution import STEP_REGION, WHOLE_TRACE, OpIndex, analyze_trace, per_forward, require_region
from attnprof.analysis.kernel_summary import kernel_table
from attnprof.errors import UserError
from attnprof.trace.reader import Args, Event, Trace, load
from support import FIXTURES

H200 = FIXTURES / "h200"


def ev(name: str, cat: str, ts: float, dur: float, pid=1, tid=1, corr: int | None = None) -> Event:
    return Event(name, cat, "X", ts, dur, pid, tid, Args(correlation=corr) if corr is not None else None)


def region(ts, dur, name="fwd", pid=1):
    return ev(name, "user_annotation", ts, dur, pid=pid)


def launch(ts, corr, pid=1, tid=1):
    return ev("cudaLaunchKernel", "cuda_runtime", ts, 2, pid=pid, tid=tid, corr=corr)


def kernel(ts, corr, name="k", cat="kernel"):
    return ev(name, cat, ts, 3, pid=0, tid=7, corr=corr)


def analyze(events, region_name=None):
    return analyze_trace(Trace("test", events), region_name)


def test_gpu_work_belongs_to_the_region_that_launched_it():
    # the kernel launched in fwd #1 runs during fwd #2's host time: it still counts for #1
    events = [region(0, 100), region(100, 100), launch(90, 1), kernel(150, 1), launch(120, 2), kernel(400, 2)]
    a = analyze(events)
    assert [len(f.activities) for f in a.forwards] == [1, 1]
    assert a.forwards[0].activities[0].launch.args.correlation == 1


def test_orphans_and_outsiders_are_counted_not_attributed():
    events = [region(0, 100), launch(10, 1), kernel(20, 1), kernel(30, 99), kernel(40, None),
              launch(500, 3), kernel(510, 3), ev("mystery", "my_category", 5, 1)]
    a = analyze(events)
    assert (a.orphans, a.outside, len(a.forwards[0].activities)) == (2, 1, 1)
    assert any("2 GPU activities match no launch" in w for w in a.warnings)


def test_kinds_and_categories():
    events = [region(0, 100), launch(1, 1), kernel(2, 1), launch(3, 2), kernel(4, 2, cat="gpu_memcpy"),
              launch(5, 3), kernel(6, 3, cat="gpu_memset")]
    facts = per_forward(analyze(events))
    assert (facts["gpu_ops"], facts["kernels"], facts["memcpy"], facts["memset"]) == (3, 1, 1, 1)


def test_regions_in_another_process_do_not_take_its_launches():
    events = [region(0, 100, pid=2), region(0, 100, pid=1), launch(10, 1, pid=2), kernel(20, 1)]
    a = analyze(events)
    assert sorted(len(f.activities) for f in a.forwards) == [0, 1]
    assert next(f for f in a.forwards if f.activities).region.pid == 2


def test_nested_regions_give_the_innermost():
    events = [region(0, 1000, "outer"), region(10, 100, "inner"), region(200, 100, "inner"),
              launch(50, 1), kernel(60, 1), launch(150, 2), kernel(160, 2), launch(250, 3), kernel(260, 3)]
    assert [len(f.activities) for f in analyze(events, "inner").forwards] == [1, 1]
    assert [len(f.activities) for f in analyze(events, "outer").forwards] == [3]


def test_a_region_longer_than_ten_seconds_still_holds_its_launches():
    events = [region(0, 60e6), launch(30e6, 1), kernel(30e6 + 5, 1)]
    assert len(analyze(events).forwards[0].activities) == 1


def test_no_region_warns_and_steps_are_the_default():
    a = analyze([kernel(2, 1)])  # no host event at all: nothing to make a region of
    assert a.region == STEP_REGION and a.forwards == [] and a.orphans == 1
    assert any("no 'ProfilerStep#*'" in w for w in a.warnings)
    gpu_only = analyze([launch(1, 1), kernel(2, 1)])  # launches and kernels, no host op: the whole trace
    assert gpu_only.region == WHOLE_TRACE and len(gpu_only.forwards[0].activities) == 1 and gpu_only.outside == 0
    steps = analyze([region(0, 10, "ProfilerStep#3"), launch(1, 1), kernel(2, 1)])
    assert steps.region == STEP_REGION and len(steps.forwards[0].activities) == 1
    assert per_forward(analyze([region(0, 10)]))["gpu_ops"] is None  # a CPU trace


def test_the_default_region_is_the_one_holding_the_most_gpu_time_not_the_most_frequent():
    """A sampled trace's most frequent annotation held 6 of 1,204 activities: the default weighs GPU time."""
    small = [e for i in range(4) for e in (region(10 * i, 5, "often"), launch(10 * i + 1, i), kernel(500, i))]
    big = [region(100, 50, "rare"), *(e for i in range(10, 16) for e in (launch(100 + i, i), kernel(600 + i, i)))]
    a = analyze(small + big)
    assert a.region == "rare" and len(a.forwards[0].activities) == 6 and a.outside == 4
    assert not any("holds only" in w for w in a.warnings)
    asked = analyze(small + big, "often")  # 4 of 10 kernels of 3 µs: under half of the GPU time, said
    assert any("region 'often' holds only 40% of the trace's GPU time (4 of 10" in w for w in asked.warnings)


def test_the_steps_are_the_default_unless_an_annotation_inside_holds_all_their_work():
    inner = [region(0, 100, "ProfilerStep#1"), region(1, 50, "attn_fwd"), launch(2, 1), kernel(200, 1)]
    assert analyze(inner).region == "attn_fwd"  # a forward in each step: the finer unit, nothing left out
    more = [*inner, launch(60, 2), kernel(210, 2)]  # the step launches outside the annotation too
    assert analyze(more).region == STEP_REGION and analyze(more).outside == 0


def test_the_empty_step_the_profiler_opens_as_it_stops_is_left_out_and_said():
    events = [region(0, 10, "ProfilerStep#1"), ev("aten::mm", "cpu_op", 1, 5), launch(2, 1), kernel(3, 1),
              region(20, 1, "ProfilerStep#2")]  # HTA's MI250 trace: step 2 holds nothing; the median was 0 ops
    a = analyze(events)
    assert len(a.forwards) == 1 and per_forward(a)["gpu_ops"] == 1
    assert any("left out 1 empty profiler step(s)" in w for w in a.warnings)
    assert len(analyze(events[-1:]).forwards) == 1  # every step empty: all kept (nothing else to show)


def test_a_region_asked_for_and_missing_is_one_line_naming_those_there_are():
    a = analyze([region(0, 10, "fwd"), region(20, 10, "fwd\nforged"), launch(1, 1), kernel(2, 1)], "nope")
    with pytest.raises(UserError) as e:
        require_region(a, "nope")
    assert str(e.value) == ("test: no region 'nope' in the trace; it has 'fwd', 'fwd\\nforged' (--region takes one of "
                            "these, or '(whole trace)': the whole trace)")  # names as repr: a newline stays inert


def brute_chain(ops: list[Event], event: Event) -> list[Event]:
    """OpIndex.chain by definition: every op on the thread that encloses the event."""
    inside = [op for op in ops if (op.pid, op.tid) == (event.pid, event.tid) and op is not event
              and op.ts <= event.ts and event.ts + event.dur <= op.ts + op.dur + 1e-3]
    return sorted(inside, key=lambda e: (e.ts, -e.dur))


def test_chain_finds_parents_far_back():
    """An op with thousands of children before the event (the old look-back stopped at 512)."""
    parent = ev("aten::outer", "cpu_op", 0, 10_000)
    kids = [ev("aten::kid", "cpu_op", 1 + i, 0.5) for i in range(3000)]
    inner = ev("aten::inner", "cpu_op", 5000, 10)
    a = analyze([region(0, 20_000), parent, *kids, inner, launch(5001, 1), kernel(5002, 1)])
    chain = a.index.chain(a.forwards[0].activities[0].launch)
    assert [op.name for op in chain] == ["aten::outer", "aten::inner"]
    assert a.index.chain(inner) == [parent] and a.index.chain(ev("x", "cpu_op", 0, 1, tid=99)) == []


def test_chain_with_overlapping_and_equal_start_ops():
    # b overlaps a without nesting; c and d are the same span (ties keep the given order)
    ops = [ev("e", "cpu_op", 12, 1), ev("a", "cpu_op", 0, 10), ev("d", "cpu_op", 5, 2),
           ev("b", "cpu_op", 5, 10), ev("c", "cpu_op", 5, 2)]
    index = OpIndex(ops)  # in any order
    for probe in [*ops, ev("p", "cuda_runtime", 6, 0.5), ev("q", "cuda_runtime", 12.2, 0.1)]:
        assert index.chain(probe) == brute_chain(ops, probe), probe.name


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("[ch]*/*.json.gz")), ids=lambda p: p.name)
def test_chain_matches_its_definition_on_real_traces(path):
    a = analyze_trace(load(path))
    ops = [e for e in a.trace.events if e.cat == "cpu_op"]
    probes = [e for e in a.trace.events if e.cat in ("cuda_runtime", "cuda_driver", "cpu_op")][::7]
    for probe in probes:
        assert a.index.chain(probe) == brute_chain(ops, probe)


def independent_counts(path: Path, region_name: str) -> list[int]:
    """Plain json, no attnprof: GPU activities per region, joined to launches by correlation id."""
    with gzip.open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    regions = sorted((e for e in events if e.get("cat") == "user_annotation" and e["name"] == region_name),
                     key=lambda e: e["ts"])
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    counts = [0] * len(regions)
    for e in events:
        launched = launches.get(e.get("args", {}).get("correlation"))
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and launched:
            hold = [i for i, r in enumerate(regions) if r["ts"] <= launched["ts"] <= r["ts"] + r["dur"]]
            counts[hold[-1]] += bool(hold)
    return counts


@pytest.mark.parametrize("name", ["llama_fwd_eager", "llama_fwd_sdpa", "8_16_1024_64_bf16_flex"])
def test_counts_equal_an_independent_count(name):
    path = H200 / f"{name}.json.gz"
    a = analyze_trace(load(path))
    assert [len(f.activities) for f in a.forwards] == independent_counts(path, a.region)
    table = kernel_table(a)
    assert sum(r["per_forward"] for r in table) == pytest.approx(per_forward(a)["gpu_ops"], abs=1)


def test_many_regions_and_launches_stay_fast():
    """3000 regions and 30000 launches between them: the old walk-back was quadratic here."""
    events = []
    for i in range(3000):
        base = i * 100.0
        events += [region(base, 40), launch(base + 10, 2 * i), kernel(base + 11, 2 * i)]
        for j in range(9):
            events += [launch(base + 50 + j, 10**6 + 10 * i + j), kernel(base + 51 + j, 10**6 + 10 * i + j)]
    events += [ev("aten::op", "cpu_op", i * 10.0, 5) for i in range(30000)]
    start = time.perf_counter()
    a = analyze(events)
    per_forward(a), kernel_table(a)
    chains = [a.index.chain(act.launch) for f in a.forwards for act in f.activities]
    assert time.perf_counter() - start < 5  # ~0.3 s; quadratic behaviour takes minutes
    assert a.outside == 27000 and all(len(f.activities) == 1 for f in a.forwards) and len(chains) == 3000


def test_step_regex_only_matches_whole_names():
    a = analyze([region(0, 10, "ProfilerStep#1x"), region(20, 10, "ProfilerStep#2")], STEP_REGION)
    assert [f.region.name for f in a.forwards] == ["ProfilerStep#2"]


def test_a_plain_profile_trace_is_analysed_as_one_whole_trace_region(tmp_path):
    """`with profile(): model(x)`: no record_function, no schedule, no steps."""
    import torch
    from torch.profiler import profile

    from attnprof.analysis.attribution import WHOLE_TRACE
    from attnprof.pipeline.one_trace import analyze_path

    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    with profile() as prof:
        model(torch.randn(2, 16))
    path = tmp_path / "plain.json"
    prof.export_chrome_trace(str(path))
    result = analyze_path(path)
    assert result["region"] == WHOLE_TRACE and result["forwards"] >= 1
    assert result["per_forward"]["aten_ops"] >= 3  # two linears and a relu
    assert any("whole trace" in w for w in result["warnings"])


def test_a_region_asked_for_by_name_never_falls_back_to_the_whole_trace():
    trace = Trace("t", [ev("aten::mm", "cpu_op", 0, 10)], [])
    a = analyze_trace(trace, "attn_fwd")
    assert a.forwards == [] and a.region == "attn_fwd"
