"""Per-forward counts on real H200 traces recorded with the article's harness
(benchmarks/device_runs/record_traces.py; torch 2.11, cuDNN 9.19, B=8 H=16 S=1024 D=64 bf16 causal)."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest

from attnprof import analyze
from support import h200_trace


def count_by_correlation(path) -> int:
    """An independent count: plain json, join GPU activities to launches inside attn_fwd ranges."""
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    regions = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "user_annotation"
               and e["name"] == "attn_fwd"]
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in events
                 if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    per_region = Counter()
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            ts = launch_ts.get(e["args"]["correlation"])
            for i, (lo, hi) in enumerate(regions):
                if ts is not None and lo <= ts <= hi:
                    per_region[i] += 1
    counts = sorted(per_region[i] for i in range(len(regions)))
    return counts[(len(counts) - 1) // 2]


@pytest.mark.parametrize("variant,gpu_ops,kernels,memcpy,memset", [
    ("naive", 7, 5, 1, 1),
    ("inplace", 6, 5, 0, 1),
    ("sdpa-math", 20, 20, 0, 0),
    ("sdpa-flash", 1, 1, 0, 0),
    ("sdpa-efficient", 1, 1, 0, 0),
    ("sdpa-cudnn", 2, 1, 0, 1),
    ("flex", 1, 1, 0, 0),
])
def test_counts_match_launch_correlation(variant, gpu_ops, kernels, memcpy, memset):
    path = h200_trace(variant)
    pf = analyze(path)["per_forward"]
    assert pf["gpu_ops"] == count_by_correlation(path) == gpu_ops
    assert (pf["kernels"], pf["memcpy"], pf["memset"]) == (kernels, memcpy, memset)


def test_late_gpu_work_of_the_step_before_is_not_counted():
    """The trace holds GPU work launched before profiling began (it ran late, inside the window).
    Dividing all GPU activities by the forwards overcounts (the article saw 22.7 for 20);
    launch correlation leaves those out as orphans."""
    path = h200_trace("sdpa-math")
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    result = analyze(path)
    assert len(gpu) / result["forwards"] > 20
    assert result["per_forward"]["gpu_ops"] == 20
    assert result["unattributed"]["orphans"] == len(gpu) - 20 * result["forwards"]
