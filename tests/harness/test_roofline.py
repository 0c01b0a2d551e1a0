"""Roofline and timing extras: rates from device time, measured and cached ceilings, CPU-bound,
pin overhead, input rotation, and the fields a run records."""

from __future__ import annotations

import json

import pytest

from attnprof.analysis.noise import Spread
from attnprof.harness import roofline
from attnprof.harness.measure import RotatingCall, Timing, note_pin_overhead
from attnprof.harness.runner import RunConfig, run
from attnprof.options import RunOptions
from attnprof.problem import Problem

H200 = {"matmul_tflops": 795.0, "copy_tbps": 4.24}  # measured there; only a fixture here


@pytest.fixture(autouse=True)
def own_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))


def test_rates_and_bound_follow_from_device_time():
    p = Problem(batch=8, heads=16, seq=1024, head_dim=64).as_dict()
    r = roofline.roofline(p, 58.0, H200)  # cuDNN on the H200: 58 us
    assert r["flops"] == 4 * 8 * 16 * 1024**2 * 64 / 2 and r["bytes"] == 4 * 8 * 16 * 1024 * 64 * 2
    assert r["tflops"] == pytest.approx(p["flops"] / 58e-6 / 1e12, rel=1e-3)
    assert r["tbps"] == pytest.approx(p["min_bytes"] / 58e-6 / 1e12, rel=1e-3)
    assert r["pct_of_matmul"] == pytest.approx(100 * r["tflops"] / 795, abs=0.1)
    assert r["bound"] == "compute"  # intensity S/4 = 256 FLOP/B, ridge 795/4.24 = 188
    short = Problem(batch=8, heads=16, seq=64, head_dim=64).as_dict()
    assert roofline.roofline(short, 5.0, H200)["bound"] == "memory"  # intensity 16 FLOP/B


def test_without_ceilings_the_rates_stand_alone():
    r = roofline.roofline(Problem().as_dict(), 100.0, None)
    assert r["tflops"] > 0 and r["pct_of_matmul"] is None and r["bound"] is None


def _rated(rate: float, size: int = 64, unstable: str | None = None) -> dict:
    import time

    spread = {"median": rate, "p25": rate, "p75": rate, "n": 5, "unstable": unstable}
    return {"rate": rate, "size": size, "spread": spread, "measured_at": round(time.time())}


def test_ceilings_are_measured_once_per_device_and_dtype(monkeypatch):
    calls = []
    rates = {"bf16": 2.0, "fp16": 2.0, "fp32": 1.0}
    monkeypatch.setattr(roofline, "measure_matmul", lambda dev, dt: calls.append(dt) or _rated(rates[dt]))
    monkeypatch.setattr(roofline, "measure_copy", lambda dev: calls.append("copy") or _rated(0.5, 1024))
    info = {"type": "cpu", "name": "x86_64", "torch": "2.13.0+cpu", "threads": 2}
    first = roofline.ceilings(info, "bf16")
    assert sorted(calls) == ["bf16", "copy", "fp32"]
    assert first["matmul_tflops"] == 2.0 and first["matmul_dtype"] == "bf16" and first["copy_tbps"] == 0.5
    assert first["spread"]["matmul"]["n"] == 5 and first["remeasured"]
    again = roofline.ceilings(info, "bf16")
    assert len(calls) == 3 and not again["remeasured"]  # read from the cache
    assert {k: v for k, v in again.items() if k != "remeasured"} == {k: v for k, v in first.items()
                                                                      if k != "remeasured"}
    roofline.ceilings(info, "fp16")
    assert calls[3:] == ["fp16"]  # only what was missing
    roofline.ceilings({**info, "torch": "2.14.0"}, "bf16")
    assert len(calls) == 7  # another torch is another key
    cache = json.loads(roofline.cache_path().read_text())
    assert "cpu | x86_64 | torch 2.13.0+cpu | 2 threads" in cache and len(cache) == 2


def test_old_or_unstable_ceilings_are_measured_again(monkeypatch):
    calls = []
    monkeypatch.setattr(roofline, "measure_matmul", lambda dev, dt: calls.append(dt) or _rated(2.0))
    monkeypatch.setattr(roofline, "measure_copy", lambda dev: calls.append("copy") or _rated(0.5, 1024, "wide"))
    info = {"type": "cpu", "name": "x86_64", "torch": "2.13.0+cpu", "threads": 1}
    first = roofline.ceilings(info, "fp32")
    assert first["unstable"] == "wide" and calls == ["fp32", "copy"]
    roofline.ceilings(info, "fp32")
    assert calls == ["fp32", "copy", "copy"]  # the unstable copy ceiling, not the stable matmul one
    cache = json.loads(roofline.cache_path().read_text())
    cache[roofline.device_key(info)]["matmul"]["fp32"]["measured_at"] -= roofline.MAX_AGE_S + 1
    roofline.cache_path().write_text(json.dumps(cache))
    roofline.ceilings(info, "fp32")
    assert calls[3:] == ["fp32", "copy"]  # a day old: measured again


def test_the_share_of_a_ceiling_names_the_ceiling():
    r = roofline.roofline(Problem().as_dict(), 100.0, {**H200, "matmul_dtype": "bf16"})
    assert r["matmul_ceiling_tflops"] == 795.0 and r["copy_ceiling_tbps"] == 4.24


def test_cpu_ceilings_are_real_and_quick():
    import time

    import torch

    t0 = time.perf_counter()
    c = roofline.ceilings({"type": "cpu", "name": "test", "torch": torch.__version__}, "bf16")
    assert c["matmul_tflops"] > 0 and c["copy_tbps"] > 0
    assert time.perf_counter() - t0 < 20  # small enough for 2 cores
    assert roofline.cache_path().is_file()


def test_a_failed_ceiling_measurement_never_fails_the_run(monkeypatch):
    def broken(info, dtype, remeasure=False):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(roofline, "ceilings", broken)
    variants = [{"status": "ok", "device_us": {"median": 10.0}}, {"status": "oom", "device_us": None}]
    results = {"device": {"type": "cpu"}, "problem": Problem().as_dict(), "variants": variants}
    roofline.add_roofline(results)
    assert "out of memory" in results["ceilings"]["error"]
    assert results["variants"][0]["roofline"]["tflops"] > 0 and results["variants"][1]["roofline"] is None


def test_a_user_target_gets_no_attention_roofline(monkeypatch):
    monkeypatch.setattr(roofline, "ceilings", lambda info, dtype, remeasure=False: None)
    variants = [{"status": "ok", "family": "target", "device_us": {"median": 10.0}},
                {"status": "ok", "family": "naive", "device_us": {"median": 10.0}}]
    results = {"device": {"type": "cpu"}, "problem": Problem().as_dict(), "variants": variants}
    roofline.add_roofline(results)
    assert variants[0]["roofline"] is None and variants[1]["roofline"]["tflops"] > 0


def _timing(device: float, host: float, method: str = "cuda-graph") -> Timing:
    return Timing(Spread(device, device, device), method, Spread(device, device, device), host, 0)


def test_cpu_bound_when_issuing_takes_longer_than_running():
    assert _timing(19.0, 40.0).cpu_bound is True  # flash at a small shape on the H200
    assert _timing(2640.0, 550.0).cpu_bound is False
    assert _timing(100.0, 100.0, "cpu-wall").cpu_bound is None  # the host does the work
    # back to back, device time is the host's pace when the host is slower: the trace decides
    assert _timing(1960.0, 1900.0, "back-to-back").cpu_bound is None


def _ok(name: str, host: float, backend: str | None = None, method: str = "cuda-graph") -> dict:
    return {"name": name, "status": "ok", "host_us": host, "backend": backend,
            "device_us": {"method": method}}


def test_pin_overhead_compares_the_same_backend_pinned_and_not():
    records = [_ok("sdpa-auto", 32.0, "cudnn"), _ok("sdpa-cudnn", 70.0), _ok("sdpa-flash", 75.0)]
    note_pin_overhead(records)
    assert records[1]["pin_overhead_us"] == 38.0 and "pin_overhead_us" not in records[2]
    unknown = [_ok("sdpa-auto", 32.0), _ok("sdpa-cudnn", 70.0)]  # not profiled: backend unknown
    note_pin_overhead(unknown)
    assert "pin_overhead_us" not in unknown[1]


def test_rotating_call_cycles_through_equal_copies():
    import torch

    args = tuple(torch.randn(4) for _ in range(3))
    seen = []
    call = RotatingCall(lambda q, k, v: seen.append(q.data_ptr()) or q, args, sets=3)
    results = [call() for _ in range(6)]
    assert call.sets == 3 and len(set(seen)) == 3 and seen[:3] == seen[3:]
    assert all(torch.equal(r, args[0]) for r in results)


def test_a_run_records_roofline_ceilings_and_timing_fields(tmp_path):
    config = RunConfig(problem=Problem(batch=1, heads=2, seq=64, head_dim=32), device="cpu",
                       variants=("naive", "sdpa-cudnn"), profile=False,
                       options=RunOptions(out=str(tmp_path), repeats=3, rotate_inputs=2))
    results, run_dir = run(config)
    on_disk = json.loads((run_dir / "results.json").read_text())
    assert on_disk["ceilings"]["matmul_tflops"] > 0 and on_disk["config"]["rotate_inputs"] == 2
    naive, cudnn = on_disk["variants"]
    assert set(naive["roofline"]) >= {"flops", "bytes", "tflops", "tbps", "pct_of_matmul", "pct_of_copy",
                                      "bound"}
    assert naive["roofline"]["flops"] == config.problem.flops() and naive["roofline"]["tflops"] > 0
    assert naive["cpu_bound"] is None and naive["first_call_includes_compile"] is False
    assert naive["threads"] == on_disk["device"]["threads"] == 1  # the CPU default, recorded
    assert naive["device_us"]["n"] >= 3 and "unstable" in naive["device_us"]
    assert naive["trace"] is None  # profiling off
    assert cudnn["status"] == "unsupported" and cudnn["roofline"] is None


@pytest.mark.cuda
def test_gpu_ceilings_are_measured_on_the_device():
    import torch

    from attnprof.harness.runner import device_info

    c = roofline.ceilings(device_info("cuda"), "bf16")
    entry = json.loads(roofline.cache_path().read_text())[c["device_key"]]
    assert c["matmul_dtype"] == "bf16" and c["matmul_n"] == 8192
    assert entry["matmul"]["bf16"]["rate"] > 2 * entry["matmul"]["fp32"]["rate"]  # tensor cores
    assert 0.3 < c["copy_tbps"] < 20 and torch.cuda.get_device_name() in c["device_key"]
    assert c["spread"]["matmul"]["n"] >= roofline.BLOCKS, c
    # a GPU's pace can move while it is measured (an H200 drifted 714 -> 669 TFLOP/s in one run): then the
    # ceiling must say why it is unstable, never pass as a tight number
    assert c["unstable"] is None or c["unstable"].split(":")[0] in ("drift", "bimodal", "outliers", "wide"), c


@pytest.mark.cuda
def test_gpu_small_fused_calls_are_cpu_bound_and_pinning_costs_host_time(tmp_path):
    config = RunConfig(problem=Problem(batch=1, heads=2, seq=128, head_dim=64), device="cuda",
                       variants=("sdpa-auto", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn"),
                       options=RunOptions(out=str(tmp_path), repeats=20, rotate_inputs=4))
    results, _ = run(config)
    runs = {v["name"]: v for v in results["variants"]}
    auto = runs["sdpa-auto"]
    assert auto["cpu_bound"] is True and auto["device_us"]["method"] == "cuda-graph"
    pinned = runs[f"sdpa-{auto['backend']}"]
    assert isinstance(pinned["pin_overhead_us"], float), pinned
    assert auto["roofline"]["pct_of_matmul"] < 100 and results["ceilings"]["matmul_dtype"] == "bf16"


def test_the_ceiling_is_the_best_of_the_distribution_kept_per_machine(monkeypatch):
    """117 then 216 GFLOP/s on a loaded machine: the kept distribution's best is the ceiling, so the share of it
    does not move 2x with the load; a re-measure on request adds to the distribution."""
    rates = iter([0.216, 0.117, 0.2])
    monkeypatch.setattr(roofline, "measure_matmul", lambda dev, dt: _rated(next(rates)))
    monkeypatch.setattr(roofline, "measure_copy", lambda dev: _rated(0.01, 1024))
    info = {"type": "cpu", "name": "x86_64", "torch": "2.13.0+cpu", "threads": 2}
    first = roofline.ceilings(info, "fp32")
    loaded = roofline.ceilings(info, "fp32", remeasure=True)
    assert first["matmul_tflops"] == loaded["matmul_tflops"] == 0.216
    assert loaded["distribution"]["matmul"]["n"] == 2 and loaded["spread"]["matmul"]["median"] == 0.117
    again = roofline.ceilings(info, "fp32", remeasure=True)
    assert again["distribution"]["matmul"] == {**again["distribution"]["matmul"], "n": 3, "best": 0.216}
    assert roofline.ceilings(info, "fp32")["remeasured"] == []  # fresh and stable: read from the cache


def test_judged_against_names_the_roof_the_percentage_is_of():
    short = Problem(batch=8, heads=16, seq=64, head_dim=64).as_dict()
    r = roofline.roofline(short, 5.0, H200)
    assert r["bound"] == "memory" and r["judged_against"] == "copy"
    long = roofline.roofline(Problem(batch=8, heads=16, seq=1024, head_dim=64).as_dict(), 58.0, H200)
    assert long["bound"] == "compute" and long["judged_against"] == "matmul"
