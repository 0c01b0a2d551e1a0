"""diff on the committed traces and on analysis / run-result dicts."""

from __future__ import annotations

import json
from functools import cache

import pytest

from attnprof.analysis import attribution as analysis
from attnprof.contracts import DIFF as SCHEMA
from attnprof.pipeline.one_trace import analysis_dict, diff
from attnprof.trace import reader as trace
from support import H200, cpu_trace, h200_trace


@cache
def load(path) -> analysis.Analysis:
    return analysis.analyze_trace(trace.load(path))


def test_naive_to_inplace_removes_the_memcpy():
    a, b = load(h200_trace("naive")), load(h200_trace("inplace"))
    d = diff(a, b)
    assert d["schema"] == SCHEMA
    assert [(r["name"], r["kind"], r["per_forward"]) for r in d["removed"]] == [
        ("Memcpy DtoD (Device -> Device)", "memcpy", 1.0)]
    assert d["added"] == []
    assert d["a"] == analysis.per_forward(a) and d["b"] == analysis.per_forward(b)
    assert d["delta"]["gpu_ops"] == -1 and d["delta"]["memcpy"] == -1 and d["delta"]["kernels"] == 0
    assert d["findings_removed"] == ["hidden-copy"] and d["findings_added"] == []
    assert d["gpu_time_us"] == pytest.approx(d["b"]["gpu_time_us"] - d["a"]["gpu_time_us"], abs=0.01)
    assert d["gpu_time_us"] < 0 and d["cpu_time_us"] is not None
    assert any("Memcpy DtoD" in line for line in d["summary"])


def test_inplace_to_naive_adds_it_back():
    d = diff(load(h200_trace("inplace")), load(h200_trace("naive")))
    assert [r["name"] for r in d["added"]] == ["Memcpy DtoD (Device -> Device)"]
    assert d["removed"] == [] and d["findings_added"] == ["hidden-copy"]
    assert (d["added"][0]["a_per_forward"], d["added"][0]["b_per_forward"]) == (0, 1)


def test_llama_eager_to_sdpa_drops_gpu_activities():
    a, b = load(H200 / "llama_fwd_eager.json.gz"), load(H200 / "llama_fwd_sdpa.json.gz")
    d = diff(a, b)
    drop = analysis.per_forward(b)["gpu_ops"] - analysis.per_forward(a)["gpu_ops"]
    assert d["delta"]["gpu_ops"] == drop < 0
    assert d["gpu_time_us"] < 0
    cudnn = [r for r in d["added"] if r["name"].startswith("cudnn_generated")]
    assert len(cudnn) == 1 and cudnn[0]["per_forward"] == 4  # one fused kernel per layer
    softmax = [r for r in d["removed"] if "softmax_warp_forward" in r["name"]]
    assert softmax and softmax[0]["per_forward"] == 4
    # the eager softmax upcast goes away with the hidden copy; SDPA's findings arrive
    assert "hidden-copy" in d["findings_removed"]
    assert {"sdpa-dispatch", "fused-attention"} <= set(d["findings_added"])
    # a count that drops but stays above 0 is reported as removed, by the difference
    partial = next(r for r in d["removed"] if r["b_per_forward"] > 0)
    assert partial["per_forward"] == pytest.approx(partial["a_per_forward"] - partial["b_per_forward"])


def test_dicts_give_the_same_diff_as_analyses():
    a, b = load(h200_trace("naive")), load(h200_trace("inplace"))
    as_json = [json.loads(json.dumps(analysis_dict(x))) for x in (a, b)]
    from_dicts, from_objects = diff(*as_json), diff(a, b)
    assert from_dicts == {**from_objects, "sources": from_dicts["sources"]}


def test_run_result_records_are_accepted():
    facts = analysis_dict(load(h200_trace("sdpa-math")))
    record_a = {"name": "sdpa-math", "status": "ok", "backend": "math", "per_forward": facts["per_forward"],
                "kernels": facts["kernels"], "findings": facts["findings"]}
    facts_b = analysis_dict(load(h200_trace("sdpa-auto")))
    record_b = {"name": "sdpa-auto", "status": "ok", "backend": "cudnn",
                "per_forward": facts_b["per_forward"], "kernels": facts_b["kernels"]}  # no findings key
    d = diff(record_a, record_b)
    assert d["backend"] == {"a": "math", "b": "cudnn"}
    assert d["delta"]["gpu_ops"] == facts_b["per_forward"]["gpu_ops"] - facts["per_forward"]["gpu_ops"]
    assert "fp32-gemm" in d["findings_removed"] and d["findings_added"] == []
    assert any(r["name"].startswith("cudnn_generated") for r in d["added"])


def timed(record: dict, median: float, iqr: float = 1.0) -> dict:
    device = {"median": median, "p25": median - iqr / 2, "p75": median + iqr / 2, "method": "cuda-graph"}
    return {**record, "device_us": device}


def test_two_run_records_lead_with_measured_device_time_and_say_no_change_inside_both_spreads():
    facts = analysis_dict(load(h200_trace("naive")))
    record = {"per_forward": facts["per_forward"], "kernels": facts["kernels"], "findings": facts["findings"]}
    same = diff(timed(record, 100.0, 4.0), timed(record, 101.0, 4.0))
    assert same["device_time"]["verdict"] == "no change"
    assert same["summary"][0] == ("device time per forward (cuda-graph) 100.0 µs -> 101.0 µs: within the noise "
                                  "(inside both spreads)")
    faster = diff(timed(record, 100.0), timed(record, 80.0))
    assert faster["device_time"]["change_pct"] == -20.0 and "-20.0%, faster" in faster["summary"][0]


def test_profiled_times_are_labelled_as_such_after_the_counts():
    d = diff(load(h200_trace("naive")), load(h200_trace("inplace")))
    assert "device_time" not in d  # traces: nothing measured outside the profiler
    assert d["summary"][0].startswith("GPU activities per forward")
    assert any(line.startswith("GPU time in the traces, per forward") for line in d["summary"])



def test_a_profiled_time_carries_a_noise_verdict_and_is_no_speed_up_claim():
    """The host time of 3 profiled forwards (what `rewrite --verify` prints after its measured speed-up): its
    line says whether the change is beyond both spreads, that 3 samples are too few, and that it is profiled."""
    d = diff(load(cpu_trace("naive")), load(cpu_trace("inplace")))
    line = next(x for x in d["summary"] if x.startswith("host time in the traces"))
    assert ("within the noise" in line) != ("beyond both spreads" in line)
    assert "marked unstable: before, after" in line  # 3 forwards a side: too few to judge the spread
    assert line.endswith("profiled, not a speed-up measure")
    spread = analysis_dict(load(cpu_trace("naive")))["forward_spread"]["cpu_time_us"]
    assert spread["n"] == 3 and spread["p25"] <= spread["median"] <= spread["p75"]


FILL = ("void at::native::vectorized_elementwise_kernel<{}, "
        "at::native::FillFunctor<float>, std::array<char*, 1ul> >")


def side(rows: list[tuple[str, float]]) -> dict:
    kernels = [{"name": n, "kind": "kernel", "per_forward": k, "avg_us": 10.0, "total_us": 30.0 * k}
               for n, k in rows]
    return {"per_forward": {"gpu_ops": sum(k for _, k in rows)}, "kernels": kernels}


def test_names_match_after_normalisation_and_counts_are_compared():
    a = side([("triton_per_fused_softmax_0", 1.0), (FILL.format(4) + "(int)", 2.0)])
    b = side([("triton_per_fused_softmax_3", 1.0), (FILL.format(8) + "(int)", 1.0)])
    d = diff(a, b)
    assert d["added"] == []
    rows = [(r["kind"], r["per_forward"], r["time_us_per_forward"]) for r in d["removed"]]
    assert rows == [("kernel", 1.0, 10.0)]
    assert "FillFunctor" in d["removed"][0]["name"]
    assert d["gpu_time_us"] is None  # neither side has it: unknown, not 0
    assert d["findings_removed"] == d["findings_added"] == []


def test_a_trace_against_itself_changes_nothing():
    a = load(h200_trace("sdpa-math"))
    d = diff(a, a)
    assert d["removed"] == d["added"] == d["findings_removed"] == d["findings_added"] == []
    assert all(v == 0 for v in d["delta"].values())


def test_cpu_traces_diff_by_host_facts():
    d = diff(load(cpu_trace("naive")), load(cpu_trace("inplace")))
    assert d["removed"] == d["added"] == []  # no GPU activities on a CPU trace
    assert d["delta"]["copies"] == -1 and d["delta"]["gpu_ops"] is None and d["gpu_time_us"] is None
    assert d["findings_removed"] == ["hidden-copy"]


def test_bad_input_is_a_type_error():
    with pytest.raises(TypeError):
        diff("naive.json.gz", {})
