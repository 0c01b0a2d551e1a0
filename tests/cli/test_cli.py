"""Bad input gets one line on stderr and exit 2, never a traceback."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from support import assert_one_line_error, attnprof, cpu_trace, h200_trace


@pytest.mark.parametrize("args,words", [
    (["run", "--variants", "naive,warp-speed"], ["warp-speed"]),
    (["run", "--heads", "0"], ["--heads", "positive"]),
    (["run", "--head-dim", "0"], ["--head-dim", "positive"]),
    (["run", "--seq", "-5"], ["--seq"]),
    (["run", "--batch", "two"], ["--batch", "'two'"]),
    (["run", "--dtype", "int8", "--device", "cpu"], ["int8"]),
    (["run", "--device", "tpu"], ["--device"]),
    (["run", "--frobnicate"], ["--frobnicate"]),
    (["dance"], ["dance"]),
    (["analyze", "/no/such/trace.json"], ["/no/such/trace.json"]),
])
def test_bad_cli_input(args, words):
    assert_one_line_error(attnprof(*args), *words)


def test_corrupt_trace(tmp_path):
    bad = tmp_path / "t.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [')[:-6])
    assert_one_line_error(attnprof("analyze", str(bad)), str(bad))


def test_debug_shows_the_traceback(tmp_path):
    proc = attnprof("--debug", "analyze", str(tmp_path / "missing.json"))
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_analyze_json_contract():
    import json

    proc = attnprof("analyze", str(h200_trace("naive")), "--json")
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["schema"] == "attnprof.analysis/1" and d["region"] == "attn_fwd" and d["forwards"] == 3
    assert set(d["per_forward"]) == {"gpu_ops", "kernels", "memcpy", "memset", "gpu_time_us", "cpu_time_us",
                                     "aten_ops", "copies"}
    assert {"name", "kind", "per_forward", "avg_us", "total_us"} <= set(d["kernels"][0])


@pytest.fixture(scope="module")
def cpu_list() -> subprocess.CompletedProcess:
    """`attnprof list --device cpu --json`, run once for the tests that read it (it imports torch: ~3 s)."""
    return attnprof("list", "--device", "cpu", "--json")


def test_list_says_why_a_variant_cannot_run(cpu_list):
    proc = cpu_list
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)["variants"]}
    assert rows["naive"]["runs_here"] and rows["naive"]["reason"] is None
    assert not rows["sdpa-cudnn"]["runs_here"] and "CPU" in rows["sdpa-cudnn"]["reason"]


def test_cli_run_small_problem_on_cpu(tmp_path):
    proc = attnprof("run", "--device", "cpu", "--batch", "1", "--heads", "2", "--seq", "64", "--head-dim", "32",
                    "--variants", "naive,inplace,sdpa-math,sdpa-cudnn", "--repeats", "3", "--out", str(tmp_path),
                    timeout=300)
    assert proc.returncode == 0, proc.stderr
    for name in ("naive", "inplace", "sdpa-math", "sdpa-cudnn"):
        assert name in proc.stdout
    assert len(list(tmp_path.glob("*/results.json"))) == 1


@pytest.mark.parametrize("value", ["1,1", "a,b,c", "1,1,0", "-1,1,3"])
def test_bad_profiler_schedule(value):
    assert_one_line_error(attnprof("run", "--schedule", value), "--schedule")


def test_run_harness_is_configurable(tmp_path):
    import json

    proc = attnprof("run", "--device", "cpu", "--batch", "1", "--heads", "2", "--seq", "32", "--head-dim", "16",
                    "--variants", "inplace", "--repeats", "2", "--warmup", "1", "--schedule", "0,1,2",
                    "--region", "my_fwd", "--rotate-inputs", "2", "--no-report", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    (results,) = tmp_path.glob("*/results.json")
    variant = json.loads(results.read_text())["variants"][0]
    assert variant["status"] == "ok"
    trace = json.loads(subprocess.run([sys.executable, "-m", "attnprof", "analyze", "--json",
                                       str(results.parent / variant["trace"])], capture_output=True,
                                      text=True).stdout)
    assert trace["region"] == "my_fwd" and trace["forwards"] == 2


def test_cuda_asked_without_a_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert_one_line_error(attnprof("run", "--device", "cuda"), "--device cuda", "no CUDA GPU")


def test_diff_of_a_variant_the_run_does_not_have(tmp_path):
    import json

    results = tmp_path / "results.json"
    results.write_text(json.dumps({"schema": "attnprof.run/1", "variants": [
        {"name": "naive", "status": "ok", "per_forward": {}, "kernels": [], "findings": []},
        {"name": "hub", "status": "unsupported", "reason": "no network"}]}))
    assert_one_line_error(attnprof("diff", f"{results}:naive", f"{results}:nope"), "no variant 'nope'")
    assert_one_line_error(attnprof("diff", f"{results}:naive", f"{results}:hub"), "did not run", "no network")


def test_cpu_run_says_it_picked_a_smaller_problem(tmp_path):
    proc = attnprof("run", "--device", "cpu", "--variants", "sdpa-flash", "--repeats", "2", "--no-report",
                    "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "smaller problem than the article's" in text and "B=2 H=8 S=256 D=64" in text
    sized = attnprof("run", "--device", "cpu", "--variants", "sdpa-flash", "--seq", "32", "--repeats", "2",
                     "--no-report", "--out", str(tmp_path))
    assert sized.returncode == 0 and "smaller problem" not in sized.stdout


def test_a_bad_option_on_cpu_is_the_only_line_printed_not_after_the_smaller_problem_note(tmp_path):
    proc = attnprof("run", "--device", "cpu", "--mode", "decode", "--q-len", "500", "--out", str(tmp_path))
    assert_one_line_error(proc, "q-len (500)")
    assert proc.stdout == ""


def test_version_and_bare_command_print_what_they_should():
    import attnprof as package

    version = attnprof("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"attnprof {package.__version__}"
    bare = attnprof()
    assert bare.returncode == 2 and bare.stdout.startswith("usage: attnprof") and "analyze" in bare.stdout


def test_list_and_run_agree_on_whether_the_hub_variant_runs_here(tmp_path, cpu_list):
    import json as json_

    import attnprof as package

    listed = {r["name"]: r for r in json_.loads(cpu_list.stdout)["variants"]}
    ran = package.run(["hub"], device="cpu", batch=1, heads=2, seq=32, head_dim=16, repeats=2, out=tmp_path)
    [hub] = ran["variants"]
    assert listed["hub"]["runs_here"] is False and hub["status"] == "unsupported"
    assert listed["hub"]["reason"] == hub["reason"]


def test_threads_are_set_for_a_cpu_run_and_recorded(tmp_path):
    import json as json_

    proc = attnprof("run", "--device", "cpu", "--variants", "sdpa-flash", "--seq", "32", "--repeats", "2",
                    "--threads", "2", "--json", "--no-report", "--no-history", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    results = json_.loads(proc.stdout)
    assert results["device"]["threads"] == 2 and results["variants"][0]["threads"] == 2
    assert results["config"]["threads"] == 2


def test_analyze_of_a_region_the_trace_lacks_names_the_regions_it_has():
    proc = attnprof("analyze", "--region", "nosuch", str(cpu_trace("naive")))
    assert_one_line_error(proc, "nosuch", "'attn_fwd'", "'ProfilerStep#*'")


def test_list_with_a_kernel_names_the_kernel_run_would_load():
    from support import FIXTURES

    proc = attnprof("list", "--device", "cpu", "--json", "--kernel", str(FIXTURES / "local_kernel"))
    assert proc.returncode == 0, proc.stderr
    hub = next(r for r in json.loads(proc.stdout)["variants"] if r["name"] == "hub")
    assert "would load toy-flash-attn from the local directory" in hub["description"]
    assert "torch-cpu" in hub["description"]
    repo = attnprof("list", "--device", "cpu", "--json", "--kernel", "kernels-community/flash-attn3@1")
    hub = next(r for r in json.loads(repo.stdout)["variants"] if r["name"] == "hub")
    assert "would load kernels-community/flash-attn3 version 1 from the Hugging Face Hub" in hub["description"]
