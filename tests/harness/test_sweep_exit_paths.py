"""Sweeps leave nothing behind: a point process dies with a SIGKILLed sweep (no orphan beside the resume),
and resuming a finished sweep records no second history run (which compare would then take as its A/B)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import attnprof

SRC = str(Path(__file__).parents[2] / "src")
CHILD = "from attnprof.harness.child import die_with_parent; die_with_parent(); import time; time.sleep(120)"
PARENT = ("import subprocess, sys, time; "
          f"c = subprocess.Popen([sys.executable, '-c', {CHILD!r}]); print(c.pid, flush=True); time.sleep(120)")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie (dead, not yet reaped by init) is not running
        return f.read().split(")")[-1].split()[0] != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_a_point_process_dies_with_its_sweep_killed_by_sigkill():
    env = {**os.environ, "PYTHONPATH": SRC}
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=env)
    child = int(parent.stdout.readline())
    time.sleep(0.5)  # the child armed its parent-death signal
    assert _alive(child)
    parent.send_signal(signal.SIGKILL)  # no clean-up runs in the parent
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child)


@pytest.mark.slow  # one small CPU sweep: ~15 s on two cores
def test_resuming_a_finished_sweep_records_no_second_history_run(tmp_path):
    db = tmp_path / "history.sqlite"
    first = attnprof("sweep", "--device", "cpu", "--batch", "1", "--heads", "2", "--head-dim", "32", "--seq", "64",
                     "--variants", "naive", "--repeats", "3", "--no-report", "--db", str(db), "--out",
                     str(tmp_path / "out"), timeout=300)
    assert first.returncode == 0, first.stderr
    (sweep_dir,) = (tmp_path / "out").iterdir()
    again = attnprof("sweep", "--resume", str(sweep_dir), "--no-report", "--db", str(db), timeout=300)
    assert again.returncode == 0, again.stderr
    assert "already complete" in again.stderr and "history run" not in again.stderr
    runs = attnprof("history", "--json", "--db", str(db))
    assert runs.returncode == 0, runs.stderr
    assert len(json.loads(runs.stdout)["runs"]) == 1
