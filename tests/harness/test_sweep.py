"""attnprof sweep: every (point, variant) lands in results.jsonl as it finishes, failures are
recorded and the sweep goes on, SIGINT keeps only complete lines, --resume runs only the rest."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnprof.harness import sweep as sweep_mod
from attnprof.harness.sweep import SweepSpec, new_sweep, read_lines, run_sweep
from attnprof.options import RunOptions
from support import assert_one_line_error, attnprof, own_cache  # noqa: F401 (own_cache: an autouse fixture)

SMALL = ["--device", "cpu", "--batch", "1", "--heads", "2", "--head-dim", "32"]


def only_dir(out: Path) -> Path:
    (found,) = out.iterdir()
    return found


def interrupted_after_the_first_line(cmd: list[str], out: Path) -> str:
    """Start the sweep `cmd`, send Ctrl-C once its first result line is written, and return its stderr
    (it must exit 130, as an interrupted command does)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        jsonl = next(out.glob("*/results.jsonl"), None)
        if jsonl and jsonl.stat().st_size:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the sweep ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    return err


def small_spec(seq=(64, 128), variants=("naive", "sdpa-math"), **kw) -> SweepSpec:
    grid = {"batch": (1,), "heads": (2,), "seq": seq, "head_dim": (32,), "dtype": ("bf16",)}
    return SweepSpec(grid, RunOptions(variants=variants, device="cpu", repeats=3, **kw))


def test_cli_sweep_writes_every_point_with_flops_and_rate_and_a_report(tmp_path):
    # the command, as written there
    proc = attnprof("sweep", *SMALL, "--variants", "naive,sdpa-math", "--seq", "64,128",
                    "--out", str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr
    sweep_dir = only_dir(tmp_path)
    raw = (sweep_dir / "results.jsonl").read_text()
    lines = [json.loads(x) for x in raw.splitlines()]
    assert sorted((x["point"]["seq"], x["variant"]) for x in lines) == [
        (64, "naive"), (64, "sdpa-math"), (128, "naive"), (128, "sdpa-math")]
    for x in lines:
        assert x["status"] == "ok", x["reason"]
        assert x["point"]["flops"] == 4 * 1 * 2 * x["point"]["seq"] ** 2 * 32 / 2
        assert x["roofline"]["flops"] == x["point"]["flops"] and x["roofline"]["tflops"] > 0
        assert x["device_us"]["median"] > 0 and x["latency_us"] and x["host_us"] > 0
        assert {"peak_memory_bytes", "per_forward", "reason"} <= set(x)
    html = (sweep_dir / "report.html").read_text()
    assert '<table id="glance"' in html and html.count("<svg") >= 2
    assert "<script" not in html and "<link" not in html and " src=" not in html  # nothing to fetch
    assert "sdpa-math" in proc.stdout  # the terminal summary


@pytest.mark.parametrize("args,words", [
    (["--seq", "64,abc"], ["--seq", "'abc'"]),
    (["--seq", "64,0"], ["--seq", "positive"]),
    (["--heads", "2,,4"], ["--heads"]),
    (["--dtype", "bf16,int8"], ["int8"]),
    (["--variants", "naive,warp-speed"], ["warp-speed"]),
    (["--resume", "/no/such/sweep"], ["/no/such/sweep"]),
    (["--resume", "/tmp", "--seq", "64"], ["--resume", "--seq"]),
])
def test_bad_sweep_input_is_one_line_and_exit_2(args, words, tmp_path):
    assert_one_line_error(attnprof("sweep", "--device", "cpu", "--out", str(tmp_path), *args), *words)
    assert not list(tmp_path.iterdir()), "nothing is created for bad input"


def test_sigint_keeps_only_complete_lines_and_exits_130(tmp_path):
    seqs = ",".join(str(64 + 16 * i) for i in range(40))
    cmd = [sys.executable, "-m", "attnprof", "sweep", *SMALL, "--variants", "naive,inplace", "--seq", seqs,
           "--repeats", "3", "--out", str(tmp_path)]
    err = interrupted_after_the_first_line(cmd, tmp_path)
    assert "--resume" in err and "Traceback" not in err
    raw = (only_dir(tmp_path) / "results.jsonl").read_text()
    assert raw.endswith("\n")
    lines = [json.loads(x) for x in raw.splitlines()]
    assert 1 <= len(lines) < 80
    assert all(x["status"] == "ok" and x["roofline"]["tflops"] > 0 for x in lines)


def test_resume_runs_only_the_points_not_yet_complete(tmp_path):
    spec = small_spec(seq=(64, 96, 128), variants=("naive", "inplace"), profile=False)
    sweep_dir = new_sweep(spec, tmp_path)
    run_sweep(spec, sweep_dir)
    path = sweep_dir / "results.jsonl"
    kept = path.read_text().splitlines(keepends=True)[:3]  # point 64 whole, point 96 half
    path.write_text("".join(kept) + '{"key": "1_2_128_32_bf16", "vari')  # killed mid-line
    started = []
    lines = run_sweep(spec, sweep_dir, lambda e, r: started.append(r["seq"]) if e == "point" else None)
    assert started == [96, 128]
    assert sorted((x["point"]["seq"], x["variant"]) for x in lines) == sorted(
        (s, v) for s in (64, 96, 128) for v in ("naive", "inplace"))
    assert all(json.loads(x) for x in path.read_text().splitlines())  # the broken tail was cut off
    again = []
    run_sweep(spec, sweep_dir, lambda event, r: again.append(event))
    assert "point" not in again and len(read_lines(path)) == 6


def test_a_point_that_fails_as_a_whole_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    real_run = sweep_mod.run

    def run_or_oom(config, listener=None):
        if config.problem.seq == 64:
            raise RuntimeError("CUDA out of memory. Tried to allocate 96.00 GiB")
        return real_run(config, listener)

    monkeypatch.setattr(sweep_mod, "run", run_or_oom)
    spec = small_spec(variants=("inplace",))
    lines = run_sweep(spec, new_sweep(spec, tmp_path))
    status = {x["point"]["seq"]: x for x in lines}
    assert status[64]["status"] == "oom" and "96.00 GiB" in status[64]["reason"]
    assert status[64]["run_dir"] is None
    assert status[128]["status"] == "ok"


def test_profiled_points_run_in_their_own_process_and_link_their_traces(tmp_path):
    spec = small_spec(seq=(64,), variants=("naive",), profile=True)
    sweep_dir = new_sweep(spec, tmp_path)
    (line,) = run_sweep(spec, sweep_dir)
    assert line["status"] == "ok" and line["per_forward"]["aten_ops"] > 0
    assert (sweep_dir / line["trace"]).is_file() and line["trace"].startswith(line["run_dir"])


@pytest.mark.cuda
def test_gpu_sweep_records_oom_fast_and_fits_exponents(tmp_path):
    from attnprof.report.plots import scaling

    # naive's B*H*S*S scores at S=65536 (1*64*2^32*2 bytes = 512 GiB) cannot fit: the OOM must be quick
    spec = SweepSpec({"batch": (1,), "heads": (64,), "seq": (1024, 2048, 65536), "head_dim": (64,)},
                     RunOptions(variants=("naive", "sdpa-flash"), device="cuda", repeats=5))
    t0 = time.monotonic()
    lines = run_sweep(spec, new_sweep(spec, tmp_path))
    by = {(x["point"]["seq"], x["variant"]): x for x in lines}
    assert by[(65536, "naive")]["status"] == "oom" and by[(65536, "sdpa-flash")]["status"] == "ok"
    assert time.monotonic() - t0 < 300
    fits = next(iter(scaling(lines).values()))
    assert fits["naive"]["memory"]["k"] > 1.7 and fits["sdpa-flash"]["memory"]["k"] < 1.3, fits



def test_an_interrupted_sweep_resumes_from_the_cli_with_the_command_it_printed(tmp_path):
    seqs = ",".join(str(64 + 16 * i) for i in range(8))
    cmd = [sys.executable, "-m", "attnprof", "sweep", *SMALL, "--variants", "naive", "--seq", seqs,
           "--repeats", "3", "--no-history", "--no-report", "--out", str(tmp_path)]
    err = interrupted_after_the_first_line(cmd, tmp_path)
    sweep_dir = only_dir(tmp_path)
    assert f"continue with --resume {sweep_dir}" in err
    done = len(read_lines(sweep_dir / "results.jsonl"))
    assert 1 <= done < 8
    resumed = attnprof("sweep", "--resume", str(sweep_dir), "--no-history", "--no-report", "--json", timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    lines = json.loads(resumed.stdout)["lines"]
    assert sorted(x["point"]["seq"] for x in lines) == [64 + 16 * i for i in range(8)]
    assert all(x["status"] == "ok" for x in lines)
    assert f"sweep of 8 points x 1 variants in {sweep_dir}" in resumed.stderr
