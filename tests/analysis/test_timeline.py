"""The time-line breakdown per GPU stream (analysis/timeline.py): busy time by HTA's kinds, idle time by HTA's
causes, launch-to-start delays per step. A SYNTHETIC trace whose every figure is worked out by hand below, and
the corpus's hta/nccl trace (ResNet DDP, 3 steps), whose activity counts are count_trace.py's."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from attnprof.analysis.attribution import analyze_trace
from attnprof.analysis.timeline import breakdown, kind_of
from attnprof.api import analyze
from attnprof.report.terminal import render_analysis
from attnprof.trace.reader import load, parse
from support import corpus_trace

# (name, category, stream, launch at, start, end): stream 7 runs A, B, C, then a copy D; stream 20 an all-reduce
ACTIVITIES = (("gemm_a", "kernel", 7, 10, 100, 200),
              ("gemm_b", "kernel", 7, 240, 250, 300),  # launched after A ended: 50 µs of host wait
              ("gemm_c", "kernel", 7, 20, 300.01, 400),  # 0.01 µs after B: kernel wait (< 30 ns)
              ("Memcpy DtoH (Device -> Pinned)", "gpu_memcpy", 7, 30, 500, 520),  # 100 µs, launched long before: other
              ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", "kernel", 20, 50, 150, 350))


def _trace() -> bytes:
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 600}]
    for corr, (name, cat, stream, launch, start, end) in enumerate(ACTIVITIES, 1):
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": launch,
                   "dur": 2, "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": start, "dur": end - start,
                   "args": {"correlation": corr, "device": 0, "stream": stream}})
    return json.dumps({"schemaVersion": 1, "traceEvents": ev}).encode()


def test_kinds_are_htas():
    assert [kind_of(n) for n, *_ in ACTIVITIES] == ["compute"] * 3 + ["memory", "communication"]
    assert kind_of("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") == "communication"


def test_each_gpu_and_stream_is_split_into_busy_kinds_and_idle_causes():
    b = breakdown(analyze_trace(parse(_trace()), "ProfilerStep#*"))
    (dev,) = b["devices"]
    assert dev["device"] == 0 and dev["activities"] == 5
    assert dev["span_us"] == pytest.approx(420.0)  # 100 to 520
    assert dev["busy_us"] == pytest.approx(320.0)  # [100, 400] (the all-reduce fills B's gap) and [500, 520]
    assert (dev["compute_us"], dev["communication_us"], dev["memory_us"]) == pytest.approx((249.99, 200.0, 20.0))
    assert dev["idle_us"] == pytest.approx(100.0)
    seven, twenty = dev["streams"]
    assert (seven["stream"], twenty["stream"]) == (7, 20)
    assert seven["idle_us"] == pytest.approx(150.01)
    assert seven["idle_by_cause"] == pytest.approx({"host_wait_us": 50.0, "kernel_wait_us": 0.01, "other_us": 100.0})
    assert twenty["idle_us"] == 0 and twenty["idle_by_cause"] == {"host_wait_us": 0, "kernel_wait_us": 0,
                                                                  "other_us": 0}


def test_launch_to_start_delays_are_read_per_step():
    delay = breakdown(analyze_trace(parse(_trace()), "ProfilerStep#*"))["launch_delay"]
    assert delay["per_instance"] == [{"activities": 5, "median_us": 100.0, "max_us": 470.0}]  # 90 10 280.01 470 100


def test_a_trace_without_gpu_activities_has_no_breakdown():
    cpu = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 5}]}
    assert breakdown(analyze_trace(parse(json.dumps(cpu).encode()))) is None


def test_the_ddp_trace_s_streams_hold_every_gpu_activity_and_their_idle_time_has_a_cause():
    path = corpus_trace("hta/nccl/nccl_data.json.gz")
    b = breakdown(analyze_trace(load(path), "ProfilerStep#*"))
    (dev,) = b["devices"]
    assert dev["activities"] == 2700 + 960 + 114  # count_trace.py's kernels, memcpy, memset
    assert sum(s["activities"] for s in dev["streams"]) == dev["activities"]
    comm = next(s for s in dev["streams"] if s["communication_us"] > 0)
    assert comm["compute_us"] == 0 and comm["activities"] == 21  # 7 NCCL kernels a step, on their own stream
    for s in dev["streams"]:
        assert sum(s["idle_by_cause"].values()) == pytest.approx(s["idle_us"], abs=0.01)
    assert [s["activities"] for s in b["launch_delay"]["per_instance"]] == [1258] * 3  # expected_per_step.json


def test_the_text_json_and_html_show_it(tmp_path):
    from attnprof.report.html import analysis_page

    d = analyze(corpus_trace("hta/nccl/nccl_data.json.gz"), region="ProfilerStep#*")
    assert d["timeline"]["devices"][0]["streams"]
    page = analysis_page(d, "trace.json.gz")
    assert "GPU time per stream" in page and "idle: host wait" in page and "launch to start" in page
    text = io.StringIO()
    render_analysis(d, Console(file=text, width=220))
    assert "GPU time per stream" in text.getvalue() and "launch to start per step: median" in text.getvalue()
