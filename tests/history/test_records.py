"""What a run, a sweep and a lint leave in the history: one row per (problem, variant)."""

from __future__ import annotations

import json

from attnprof.history import records

PROBLEM = {"batch": 1, "heads": 2, "seq": 64, "head_dim": 16, "dtype": "bf16", "causal": True}
ENV = {"cpu": "AMD EPYC", "torch": "2.13.0+cpu", "gpu": "NVIDIA H200"}


def _variant(name: str, **extra) -> dict:
    return {"name": name, "status": "ok", "reason": None,
            "per_forward": {"gpu_ops": 7, "kernels": 5, "memcpy": 1, "memset": 1, "aten_ops": 39, "copies": 1},
            "device_us": {"median": 10.0, "p25": 9.0, "p75": 11.0, "method": "cuda-graph"},
            "latency_us": {"median": 12.0, "p25": 11.0, "p75": 13.0}, "host_us": 8.0,
            "peak_memory_bytes": 1024, "max_abs_error": 1e-3, "findings": [{"id": "hidden-copy"}], **extra}


def test_a_run_keeps_times_with_spreads_counts_and_finding_ids():
    results = {"device": {"type": "cuda", "name": "NVIDIA H200"}, "problem": PROBLEM, "run_dir": "out/x",
               "variants": [_variant("naive"), {"name": "flash", "status": "unsupported", "reason": "no GPU"}]}
    run = records.from_run(results, "attnprof run", ENV)
    assert (run["kind"], run["problem"], run["device_kind"]) == ("run", "1_2_64_16_bf16", "cuda:NVIDIA H200")
    naive, flash = run["variants"]
    assert naive["device_us"]["p75"] == 11.0 and naive["kernels"] == 5 and naive["findings"] == ["hidden-copy"]
    assert (flash["status"], flash["reason"], flash["kernels"], flash["device_us"]) == ("unsupported", "no GPU",
                                                                                          None, None)


def test_a_sweep_is_one_run_with_a_row_per_point_and_the_findings_of_its_point(tmp_path):
    (tmp_path / "sweep.json").write_text(json.dumps({"device": {"type": "cpu", "name": "x86_64"}}))
    point = tmp_path / "points" / "p1"
    point.mkdir(parents=True)
    (point / "results.json").write_text(json.dumps({"variants": [_variant("naive")]}))
    lines = [{**_variant("naive"), "variant": "naive", "point": {**PROBLEM, "seq": s}, "run_dir": rd}
             for s, rd in ((64, "points/p1"), (128, None))]
    for line in lines:
        del line["name"], line["findings"]  # a sweep line has neither; the point's results.json has findings
    run = records.from_sweep(tmp_path, lines, "attnprof sweep", ENV)
    assert run["kind"] == "sweep" and run["device_kind"] == "cpu:AMD EPYC"
    assert run["problem"] == "1_2_128_16_bf16 + 1_2_64_16_bf16"
    assert [(v["problem"], v["findings"]) for v in run["variants"]] == [("1_2_64_16_bf16", ["hidden-copy"]),
                                                                        ("1_2_128_16_bf16", [])]


def test_a_lint_is_the_target_as_one_variant_with_counts_and_no_times():
    report = {"target": "model.py:make", "device": "cuda", "per_forward": {"gpu_ops": 12, "copies": 3},
              "findings": [{"id": "hidden-copy"}, {"id": "mask-rebuilt"}]}
    run = records.from_lint(report, "attnprof lint model.py:make", ENV)
    [row] = run["variants"]
    assert (run["kind"], run["device_kind"]) == ("lint", "cuda:NVIDIA H200")
    assert (row["name"], row["gpu_ops"], row["copies"], row["device_us"]) == ("model.py:make", 12, 3, None)
    assert row["findings"] == ["hidden-copy", "mask-rebuilt"]
