"""Sweep plots per mode: each workload its own curves, a decode group against bandwidth, not FLOP/s."""

from __future__ import annotations

from attnprof.problem import Problem
from attnprof.report import plots


def line(mode: str, seq: int, variant: str = "sdpa-cudnn") -> dict:
    point = Problem(batch=8, heads=32, kv_heads=8, seq=seq, head_dim=128, mode=mode).as_dict()
    return {"point": point, "variant": variant, "status": "ok",
            "device_us": {"median": seq / 100, "p25": seq / 100, "p75": seq / 100, "method": "cuda-graph"},
            "roofline": {"tflops": 1.0, "tbps": 3.9}, "peak_memory_bytes": None}


def test_each_mode_is_its_own_group_and_decode_plots_bandwidth():
    lines = [line(mode, s) for mode in ("fwd", "decode") for s in (1024, 2048, 4096)]
    groups = plots.by_group(lines)
    assert set(groups) == {"B=8 H=32 D=128 bf16 Hkv=8", "B=8 H=32 D=128 bf16 Hkv=8 decode"}
    titles = [p["title"] for p in plots.sweep_plots(lines, {"bf16": 790.0})]
    assert any(t.startswith("Achieved TB/s") and t.endswith("decode") for t in titles)
    assert any(t.startswith("Achieved TFLOP/s") and not t.endswith("decode") for t in titles)
