"""The runner on CPU: every variant gets a status, failures are isolated, files are complete."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import attnprof
from attnprof import variants as registry
from attnprof.problem import Problem, make_inputs, reference_output

SMALL = dict(batch=1, heads=2, seq=64, head_dim=32, device="cpu", repeats=3)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    return attnprof.run(out=tmp_path_factory.mktemp("run"), **SMALL)


def by_name(results):
    return {v["name"]: v for v in results["variants"]}


def test_every_variant_has_a_status_and_non_ok_ones_a_reason(small_run):
    assert [v["name"] for v in small_run["variants"]] == registry.names()
    for v in small_run["variants"]:
        assert v["status"] in {"ok", "unsupported", "oom", "error"}
        assert (v["reason"] is None) == (v["status"] == "ok"), v


def test_hand_written_and_math_run_and_match_the_reference(small_run):
    runs = by_name(small_run)
    for name in ("naive", "inplace", "sdpa-math"):
        assert runs[name]["status"] == "ok"
        assert runs[name]["max_abs_error"] < 0.05  # bf16 against a float64 reference
        assert runs[name]["device_us"]["median"] > 0


def test_naive_shows_more_copies_than_inplace(small_run):
    runs = by_name(small_run)
    assert runs["naive"]["per_forward"]["copies"] > runs["inplace"]["per_forward"]["copies"]


def test_cpu_trace_has_no_gpu_fields(small_run):
    pf = by_name(small_run)["naive"]["per_forward"]
    assert pf["gpu_ops"] is None and pf["kernels"] is None and pf["aten_ops"] > 0


def test_results_file_matches_what_run_returned(small_run, tmp_path):
    from pathlib import Path

    run_dir = Path(small_run["run_dir"])
    on_disk = json.loads((run_dir / "results.json").read_text())
    assert on_disk["schema"] == "attnprof.run/1"
    assert on_disk["variants"] == small_run["variants"]
    for v in on_disk["variants"]:
        if v["status"] == "ok":
            assert (run_dir / v["trace"]).stat().st_size > 0
            assert "Name" in (run_dir / v["table"]).read_text()
    assert not list(run_dir.glob(".*tmp*")), "temporary files left behind"


def test_two_runs_into_one_out_keep_separate_folders(tmp_path):
    a = attnprof.run(["inplace"], out=tmp_path, **SMALL)
    b = attnprof.run(["inplace"], out=tmp_path, **SMALL)
    assert a["run_dir"] != b["run_dir"]
    assert len(list(tmp_path.iterdir())) == 2


def test_a_failing_variant_is_recorded_and_the_run_goes_on(tmp_path, monkeypatch):
    def explode(problem, device, options):
        def forward(q, k, v):
            raise RuntimeError("CUDA out of memory. Tried to allocate 64.00 GiB")

        return forward

    broken = replace(registry.REGISTRY["naive"], name="broken", build=explode)
    monkeypatch.setitem(registry.REGISTRY, "broken", broken)
    results = attnprof.run(["broken", "inplace"], out=tmp_path, **SMALL)
    runs = by_name(results)
    assert runs["broken"]["status"] == "oom" and "64.00 GiB" in runs["broken"]["reason"]
    assert runs["inplace"]["status"] == "ok" and runs["inplace"]["per_forward"] is not None


def test_unknown_variant_fails_before_any_work(tmp_path):
    with pytest.raises(registry.UnknownVariant):
        attnprof.run(["nope"], out=tmp_path, **SMALL)
    assert not tmp_path.exists() or not list(tmp_path.iterdir())


def test_reference_matches_sdpa_in_float64():
    import torch
    import torch.nn.functional as F

    problem = Problem(batch=2, heads=2, seq=48, head_dim=16, dtype="fp32")
    q, k, v = (t.double() for t in make_inputs(problem, "cpu"))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(reference_output(q, k, v), expected, atol=1e-12)


@pytest.mark.parametrize("field,value", [("heads", 0), ("head_dim", -1), ("dtype", "int8")])
def test_problem_rejects_bad_sizes(field, value):
    with pytest.raises(ValueError, match=field.replace("_", "-") if field != "dtype" else "dtype"):
        Problem(**{field: value})


def test_flops_and_bytes_follow_the_formulas():
    p = Problem(batch=8, heads=16, seq=1024, head_dim=64)
    assert p.flops() == 4 * 8 * 16 * 1024**2 * 64 / 2
    assert p.min_bytes() == 4 * 8 * 16 * 1024 * 64 * 2


def test_pinned_backend_reason_keeps_torchs_words_without_the_noise():
    from attnprof.harness.failures import why

    assert why("Flash attention kernel not used because: (Triggered internally at sdp_utils.cpp:988.)") is None
    assert why("Memory Efficient attention has been runtime disabled. (Triggered internally at x.h:552.)") is None
    words = "Expected query, key and value to all be of dtype: {Half, BFloat16}. Got Query dtype: float instead."
    assert why(f"{words} (Triggered internally at /pytorch/aten/src/sdp_utils.cpp:700.)") == words


def test_a_compile_failure_is_recorded_and_the_run_goes_on(tmp_path, monkeypatch):
    import torch

    def broken_compile(fn, *args, **kwargs):
        raise RuntimeError("BackendCompilerFailed: inductor raised LoweringException")

    monkeypatch.setattr(torch, "compile", broken_compile)
    results = attnprof.run(["inplace+compile", "inplace"], out=tmp_path, **SMALL)
    runs = by_name(results)
    assert runs["inplace+compile"]["status"] == "error"
    assert "BackendCompilerFailed" in runs["inplace+compile"]["reason"]
    assert runs["inplace"]["status"] == "ok"


def test_sigint_keeps_the_finished_variants_and_exits_130(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "attnprof", "run", "--device", "cpu", "--batch", "1", "--heads", "2", "--seq", "128",
         "--head-dim", "32", "--variants", "inplace,sdpa-math,naive,sdpa-flash", "--repeats", "400",
         "--out", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:  # wait until the first variant's measurements are on disk
        files = list(tmp_path.glob("*/results.json"))
        if files and json.loads(files[0].read_text())["variants"]:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    (results,) = tmp_path.glob("*/results.json")
    kept = json.loads(results.read_text())["variants"]  # complete JSON: written atomically
    assert kept[0]["name"] == "inplace" and kept[0]["status"] == "ok" and kept[0]["device_us"]["median"] > 0
    assert not list(results.parent.glob(".*tmp*"))


def test_the_load_average_while_timing_is_recorded_against_the_core_count(small_run):
    import os

    load = small_run["load"]
    assert load["cores"] == os.cpu_count() and load["max_load_average"] >= 0


def test_each_variant_trains_leaves_of_its_own_so_what_one_keeps_cannot_reach_the_next(tmp_path, monkeypatch):
    """A variant that keeps a step's output keeps that step's graph down to its leaves' AccumulateGrad nodes; on
    leaves shared with the next variant those nodes, made on another stream, made CUDA graph capture of every
    later variant's step refuse (docs/kernel.md, the train run's 1.17 ms). Its own leaves: the same memory."""
    seen, kept = {}, []

    def recording(name):
        def build(problem, device, options):
            def forward(q, k, v):
                seen.setdefault(name, (q, k, v))
                out = q + k + v
                kept.append(out)  # a leaky kernel: every output, and with it its graph, kept
                return out

            return forward

        return replace(registry.REGISTRY["naive"], name=name, build=build)

    for name in ("leaky", "next"):
        monkeypatch.setitem(registry.REGISTRY, name, recording(name))
    results = attnprof.run(["leaky", "next"], out=tmp_path, mode="train", **SMALL)
    assert [v["status"] for v in results["variants"]] == ["ok", "ok"]
    for ours, theirs in zip(seen["leaky"], seen["next"], strict=True):
        assert ours is not theirs and ours.data_ptr() == theirs.data_ptr()
        assert ours.requires_grad and theirs.requires_grad and ours.grad_fn is None and theirs.grad_fn is None
