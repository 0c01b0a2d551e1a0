"""The at-a-glance column on real H200 traces: what each variant's trace revealed."""

from __future__ import annotations

import attnprof
from attnprof.report.glance import revealed
from support import h200_trace


def record(variant: str, **extra) -> dict:
    d = attnprof.analyze(h200_trace(variant))
    return {"name": variant, "status": "ok", "findings": d["findings"], **extra}


def test_naive_reveals_the_hidden_copy_with_its_cost():
    from attnprof.units import us

    naive = record("naive")
    cost = next(f["cost_us"] for f in naive["findings"] if f["id"] == "hidden-copy")
    assert 120 < cost < 130  # the masked_fill copy of the scores: ~127 µs a forward on the H200
    assert f"hidden-copy ({us(cost)}/fwd)" in revealed(naive)
    assert "hidden-copy" not in revealed(record("inplace"))


def test_fused_kernels_are_named_with_their_occupancy():
    assert "FlashAttention-2, 12.5% occupancy" in revealed(record("sdpa-flash", backend="flash"))
    cudnn = revealed(record("sdpa-cudnn", backend="cudnn"))
    assert cudnn.startswith("ran cudnn, cuDNN, 18.75% occupancy") and "CUPTI reads 0%" in cudnn


def test_math_reveals_its_three_wastes():
    text = revealed(record("sdpa-math", backend="math"))
    for fid in ("fp32-gemm", "safe-softmax", "mask-rebuilt"):
        assert fid in text


def test_cpu_bound_comes_from_the_timing_not_the_trace():
    flash = record("sdpa-flash", backend="flash")
    assert "cpu-bound" not in revealed({**flash, "cpu_bound": False})
    assert "cpu-bound (host 90.0 µs ≥ device 60.0 µs" in revealed(
        {**flash, "cpu_bound": True, "host_us": 90.0, "device_us": {"median": 60.0}})


def test_a_variant_that_did_not_run_shows_its_reason():
    assert revealed({"name": "hub", "status": "unsupported", "reason": "no network"}) == "no network"


def test_back_to_back_host_bound_names_gpu_busy_time_and_idle_share():
    text = revealed({"name": "target", "status": "ok", "cpu_bound": True, "host_us": 1900.0, "gpu_busy_us": 930.0,
                     "gpu_idle_share": 0.526, "device_us": {"median": 1960.0, "method": "back-to-back"}})
    assert "GPU busy 930.0 µs, idle 53% back to back" in text


def test_costs_the_profiler_inflated_show_as_shares_of_the_call():
    copy = {"id": "hidden-copy", "severity": "warn", "cost_us": 8000.0, "share_of_forward": 0.4,
            "cost_trusted": False}
    text = revealed({"name": "naive", "status": "ok", "findings": [copy],
                     "profiler": {"inflation": 7.94, "costs_trusted": False}})
    assert "hidden-copy (40% of the call)" in text and "8.00 ms" not in text and "7.94x" in text


def test_back_to_back_timing_names_its_method_and_the_gpu_busy_time_even_when_not_host_bound():
    text = revealed({"name": "target", "status": "ok", "cpu_bound": False, "host_us": 100.0, "gpu_busy_us": 900.0,
                     "gpu_idle_share": 0.1, "device_us": {"median": 1000.0, "method": "back-to-back"}})
    assert "device time back to back (no graph capture): GPU busy 900.0 µs, idle 10%" in text
