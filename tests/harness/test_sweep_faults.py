"""A sweep in a hostile environment: an `attnprof/` folder in the current directory, SIGTERM, a full
disk, flags that --resume would ignore. The point processes run the installed attnprof, die with the
sweep, and a point that could not be written is retried, never recorded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnprof.files import new_run_dir
from attnprof.harness import sweep as sweep_mod
from attnprof.harness.sweep import SweepSpec, new_sweep, read_lines, run_sweep
from attnprof.options import RunOptions
from support import assert_one_line_error, attnprof, own_cache  # noqa: F401 (own_cache: an autouse fixture)

SMALL = ["--device", "cpu", "--batch", "1", "--heads", "2", "--head-dim", "32"]
ENTRY = str(Path(sys.executable).with_name("attnprof"))  # the console script: it never imports from the cwd


def small_spec(**kw) -> SweepSpec:
    grid = {"batch": (1,), "heads": (2,), "seq": (64, 128), "head_dim": (32,), "dtype": ("bf16",)}
    return SweepSpec(grid, RunOptions(variants=("naive",), device="cpu", repeats=3, **kw))


def test_point_processes_never_import_attnprof_from_the_current_folder(tmp_path):
    trap = tmp_path / "attnprof"
    trap.mkdir()
    (trap / "__init__.py").write_text("import pathlib\npathlib.Path(__file__).with_name('RAN').write_text('x')\n")
    (trap / "harness").mkdir()
    (trap / "harness" / "__init__.py").write_text("")
    (trap / "harness" / "sweep.py").write_text("raise SystemExit('the impostor ran')\n")
    proc = subprocess.run([ENTRY, "sweep", *SMALL, "--seq", "64", "--variants", "naive", "--profile",
                           "--no-report", "--no-history", "--json", "--out", "out"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert not (trap / "RAN").exists()
    (line,) = json.loads(proc.stdout)["lines"]
    assert line["status"] == "ok" and line["trace"], line


def point_processes(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        found += [int(c) for c in task.read_text().split()]
    return [c for c in found if b"point_main" in cmdline(c)]


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # it ended meanwhile
        return b""


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc")
def test_sigterm_ends_the_point_process_too(tmp_path):
    seqs = ",".join(str(64 + 16 * i) for i in range(20))
    sweep = subprocess.Popen([ENTRY, "sweep", *SMALL, "--seq", seqs, "--variants", "naive", "--profile",
                              "--no-history", "--out", str(tmp_path)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline, kids = time.monotonic() + 120, []
    while time.monotonic() < deadline and sweep.poll() is None and not kids:
        kids = point_processes(sweep.pid)
        time.sleep(0.05)
    assert kids, "no point process started"
    sweep.send_signal(signal.SIGTERM)
    _, err = sweep.communicate(timeout=60)
    assert sweep.returncode == 130, err
    assert "--resume" in err and "Traceback" not in err
    time.sleep(0.5)
    for kid in kids:
        with pytest.raises(ProcessLookupError):
            os.kill(kid, 0)


def test_a_point_that_could_not_be_written_stops_the_sweep_and_resume_runs_it(tmp_path, monkeypatch):
    full = {"disk": True}

    def run_on_a_full_disk(config, listener=None):  # the runner's results, without measuring anything
        if config.problem.seq == 128 and full["disk"]:
            raise OSError(28, "No space left on device", str(config.options.out))
        run_dir = new_run_dir(config.options.out, config.problem.tag)
        return {"variants": [{"name": name, "status": "ok"} for name in config.variants]}, run_dir

    monkeypatch.setattr(sweep_mod, "run", run_on_a_full_disk)
    spec = small_spec()
    sweep_dir = new_sweep(spec, tmp_path)
    with pytest.raises(OSError, match="No space left"):
        run_sweep(spec, sweep_dir)
    assert [x["point"]["seq"] for x in read_lines(sweep_dir / "results.jsonl")] == [64]
    full["disk"] = False
    lines = run_sweep(spec, sweep_dir)
    assert sorted((x["point"]["seq"], x["status"]) for x in lines) == [(64, "ok"), (128, "ok")]


def test_a_point_process_that_could_not_write_is_not_a_finished_point(tmp_path, monkeypatch):
    full = "import sys; print('points: No space left on device', file=sys.stderr); sys.exit(75)"
    monkeypatch.setattr(sweep_mod, "python_running", lambda module, function: [sys.executable, "-c", full])
    spec = small_spec(profile=True)
    sweep_dir = new_sweep(spec, tmp_path)
    with pytest.raises(OSError, match="No space left"):
        run_sweep(spec, sweep_dir)
    assert read_lines(sweep_dir / "results.jsonl") == []


def test_the_point_process_reports_an_unwritable_point_apart(tmp_path, monkeypatch, capsys):
    def full(config, listener=None):
        raise OSError(28, "No space left on device", str(config.options.out))

    monkeypatch.setattr(sweep_mod, "run", full)
    spec = small_spec(profile=True)
    sweep_dir = new_sweep(spec, tmp_path)
    assert sweep_mod.point_main([str(sweep_dir), spec.points()[0].tag]) == sweep_mod.UNWRITTEN
    assert "No space left on device" in capsys.readouterr().err


def test_resume_names_every_flag_it_would_ignore(tmp_path):
    proc = attnprof("sweep", "--resume", str(tmp_path), "--seq", "64", "--variants", "naive", "--repeats", "3",
                    "--profile", "--json")
    assert_one_line_error(proc, "--seq", "--variants", "--repeats", "--profile")
    assert "--json" not in proc.stderr  # honoured, not ignored
