"""Ring attention traces recorded on 2 x H200 (torch 2.11, NCCL 2.28.9) by benchmarks/device_runs/cp_h200x2.sh:
`attnprof run --nproc 2 --seq 32768` (B=1 H=16 D=128 bf16 causal, context_parallel, allgather rotation,
load-balanced), 3 profiled steps per rank. The figures are checked against an independent count: a sweep
over the kernels' start and end points, straight from the JSON."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from attnprof.analysis.attribution import analyze_trace
from attnprof.findings import run_findings
from attnprof.pipeline.ranks import analyze_ranks
from attnprof.trace.reader import load
from support import FIXTURES

CP2 = FIXTURES / "h200_cp2"


def _traces(variant: str, mode: str = "train") -> list[Path]:
    return [CP2 / f"1_16_32768_128_bf16_{variant}_{mode}_rank{r}.json.gz" for r in (0, 1)]


def _sweep(path: Path) -> list[dict]:
    """Per profiler step: NCCL kernels launched in it, their union, and the part of it no other kernel on
    the GPU covers, by walking every start and end point in order (no interval merging)."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    steps = sorted((e for e in events if e.get("name", "").startswith("ProfilerStep#")), key=lambda e: e["ts"])
    kernels = [e for e in events if e.get("cat") == "kernel"]
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    points = sorted({p for k in kernels for p in (k["ts"], k["ts"] + k["dur"])})
    out = []
    for step in steps:
        def launched_here(k, step=step):
            launch = launches.get(k["args"].get("correlation"))
            return launch is not None and step["ts"] <= launch["ts"] <= step["ts"] + step["dur"]
        nccl = [k for k in kernels if k["name"].startswith("nccl") and launched_here(k)]
        other = [k for k in kernels if not k["name"].startswith("nccl")]
        comm = exposed = 0.0
        for lo, hi in zip(points, points[1:], strict=False):
            mid = (lo + hi) / 2
            if any(k["ts"] <= mid <= k["ts"] + k["dur"] for k in nccl):
                comm += hi - lo
                if not any(k["ts"] <= mid <= k["ts"] + k["dur"] for k in other):
                    exposed += hi - lo
        out.append({"nccl": len(nccl), "comm": comm, "exposed": exposed})
    return out


@pytest.mark.parametrize("variant", ["sdpa-cudnn", "sdpa-flash"])
def test_both_ranks_are_found_with_exact_nccl_counts_and_comm_within_10_percent(variant):
    result = analyze_ranks(_traces(variant))
    assert [(r["rank"], r["world_size"], r["backend"]) for r in result["ranks"]] == [(0, 2, "nccl"), (1, 2, "nccl")]
    assert result["distributed"]["missing_ranks"] == [] and result["distributed"]["instances"] == 3
    for r, path in zip(result["ranks"], _traces(variant), strict=True):
        steps = _sweep(path)
        median = sorted(steps, key=lambda s: s["comm"])[1]
        assert r["nccl_kernels"] == median["nccl"] == 4  # two all-gathers and two send/recvs per step
        assert r["comm_us"] == pytest.approx(sorted(s["comm"] for s in steps)[1], rel=0.10)
        assert r["exposed_comm_us"] == pytest.approx(sorted(s["exposed"] for s in steps)[1], rel=0.10)
        overlap = 1 - sorted(s["exposed"] for s in steps)[1] / sorted(s["comm"] for s in steps)[1]
        assert r["overlap_fraction"] == pytest.approx(overlap, abs=0.05)


@pytest.mark.parametrize("variant", ["sdpa-cudnn", "sdpa-flash"])
def test_exposed_comm_is_named_from_one_ranks_trace_alone(variant):
    trace = load(_traces(variant)[0])
    found = {f["id"]: f for f in run_findings(analyze_trace(trace))}
    assert "exposed-comm" in found and found["exposed-comm"]["evidence"]["rank"] == 0
    assert "cp-merge-overhead" in found  # the ring's merges: CatArrayBatchedCopy and elementwise adds


def test_the_default_region_of_a_rank_trace_is_the_step_not_a_collectives_annotation():
    assert analyze_trace(load(_traces("sdpa-cudnn")[0])).region == "attn_step"


def test_load_balanced_ranks_do_equal_work_so_no_imbalance_is_reported():
    result = analyze_ranks(_traces("sdpa-cudnn"))
    assert result["distributed"]["imbalance"] < 1.05
    assert "cp-imbalance" not in {f["id"] for f in result["findings"]}
    assert result["distributed"]["skew_end_us"] < 200  # the ring keeps the ranks within ~20 µs


def test_the_forward_alone_has_one_all_gather_per_step():
    result = analyze_ranks(_traces("sdpa-cudnn", "fwd"))
    assert [r["nccl_kernels"] for r in result["ranks"]] == [1, 1]
