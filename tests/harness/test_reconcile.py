"""The trace's numbers next to the unprofiled timing: profiler inflation, shares, GPU busy and idle."""

from __future__ import annotations

from attnprof.harness.reconcile import reconcile


def finding(fid: str, cost: float) -> dict:
    return {"id": fid, "severity": "warn", "message": "", "evidence": {}, "fix": None, "cost_us": cost}


def test_a_cpu_cost_the_profiler_inflated_is_a_share_of_the_call():
    """The README's case: hidden-copy 8 ms in the trace of a call measured at 2.52 ms."""
    record = {"per_forward": {"cpu_time_us": 20_000.0}, "device_us": {"median": 2520.0, "method": "cpu-wall"},
              "host_us": 2520.0, "findings": [finding("hidden-copy", 8000.0)]}
    reconcile(record)
    assert record["profiler"]["inflation"] == 7.94 and record["profiler"]["costs_trusted"] is False
    [f] = record["findings"]
    assert f["share_of_forward"] == 0.4 and f["cost_trusted"] is False


def test_a_host_bound_target_timed_back_to_back_gets_gpu_busy_time_and_idle_share():
    """transformers GPT-2 on the H200: 1.96 ms back to back, the GPU busy 0.93 ms of it."""
    record = {"per_forward": {"cpu_time_us": 2600.0, "gpu_time_us": 930.0}, "host_us": 1900.0,
              "device_us": {"median": 1960.0, "method": "back-to-back"}, "cpu_bound": None,
              "findings": [finding("cpu-bound", 9999.0), finding("hidden-copy", 20.0)]}
    reconcile(record)
    assert record["gpu_busy_us"] == 930.0 and record["gpu_idle_share"] == 0.526 and record["cpu_bound"] is True
    ids = [f["id"] for f in record["findings"]]
    assert ids == ["cpu-bound", "hidden-copy"]  # the trace's cpu-bound replaced by the timing's
    assert record["findings"][0]["cost_us"] == 970.0 and record["findings"][1]["cost_trusted"] is True


def test_graph_replay_keeps_its_own_verdict():
    record = {"per_forward": {"cpu_time_us": 60.0, "gpu_time_us": 19.0}, "host_us": 10.0, "cpu_bound": False,
              "device_us": {"median": 19.5, "method": "cuda-graph"}, "findings": []}
    reconcile(record)
    assert record["cpu_bound"] is False and record["findings"] == [] and record["gpu_idle_share"] == 0.026
