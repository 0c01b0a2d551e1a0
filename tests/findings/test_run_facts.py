"""What a run knows beyond its trace, given to the rules (findings.run_facts): the profiler's inflation, the
shares and trust of costs, GPU busy and idle, host-bound; a finding is decided once, by its rule."""

from __future__ import annotations

from attnprof.analysis.attribution import analyze_trace
from attnprof.findings import run_findings
from attnprof.findings.run_facts import BARE, RunFacts, measured
from attnprof.trace.reader import load
from support import CPU, h200_trace


def test_a_cpu_cost_the_profiler_inflated_is_a_share_of_the_call():
    """The README's case: a trace of 20 ms host time for a call measured at 2.52 ms."""
    seen = measured({"cpu_time_us": 20_000.0}, {"device_us": {"median": 2520.0, "method": "cpu-wall"},
                                                 "host_us": 2520.0})
    assert seen["profiler"]["inflation"] == 7.94 and seen["profiler"]["costs_trusted"] is False
    assert seen["forward_us"] == 20_000.0 and "gpu_busy_us" not in seen


def test_a_host_bound_target_timed_back_to_back_gets_gpu_busy_time_and_idle_share():
    """transformers GPT-2 on the H200: 1.96 ms back to back, the GPU busy 0.93 ms of it."""
    seen = measured({"cpu_time_us": 2600.0, "gpu_time_us": 930.0},
                    {"host_us": 1900.0, "device_us": {"median": 1960.0, "method": "back-to-back"}, "cpu_bound": None})
    assert seen["gpu_busy_us"] == 930.0 and seen["gpu_idle_share"] == 0.526 and seen["cpu_bound"] is True


def test_graph_replay_keeps_its_own_verdict():
    seen = measured({"cpu_time_us": 60.0, "gpu_time_us": 19.0},
                    {"host_us": 10.0, "cpu_bound": False, "device_us": {"median": 19.5, "method": "cuda-graph"}})
    assert seen["cpu_bound"] is False and seen["gpu_idle_share"] == 0.026


def test_with_a_run_s_timing_each_finding_has_its_share_and_trust_and_the_list_is_ranked():
    a = analyze_trace(load(CPU / "1_2_64_32_bf16_naive.json.gz"))
    bare = run_findings(a)
    assert bare and all("share_of_forward" not in f for f in bare)
    cpu = run_findings(a, facts=RunFacts(timing={"device_us": {"median": 1.0, "method": "cpu-wall"},
                                                                  "host_us": 1.0, "cpu_bound": None}))
    assert [f["id"] for f in cpu] == [f["id"] for f in bare]
    assert all(f["cost_trusted"] is False and f["share_of_forward"] is not None for f in cpu)
    costs = [f["cost_us"] for f in cpu]
    assert costs == sorted(costs, reverse=True)


def test_a_training_step_s_words_come_from_the_unit_the_rules_are_given():
    a = analyze_trace(load(h200_trace("sdpa-cudnn")))
    assert "per forward" in " ".join(f["message"] for f in run_findings(a, facts=BARE))
    stepped = " ".join(f["message"] for f in run_findings(a, facts=RunFacts(unit="step")))
    assert "per step" in stepped and "per forward" not in stepped
