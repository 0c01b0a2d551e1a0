"""`attnprof run --ncu` where Nsight Compute cannot run: one line says so and the run finishes."""

from __future__ import annotations

import json

from support import attnprof


def test_run_ncu_on_cpu_says_why_in_one_line_and_the_run_goes_on(tmp_path):
    proc = attnprof("run", "--ncu", "--device", "cpu", "--batch", "1", "--heads", "2", "--seq", "32",
                    "--head-dim", "16", "--variants", "inplace", "--repeats", "2", "--warmup", "1",
                    "--schedule", "0,1,1", "--no-report", "--no-history", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if "--ncu" in line]
    assert len(notes) == 1 and "CPU" in notes[0]
    (results,) = tmp_path.glob("*/results.json")
    saved = json.loads(results.read_text())
    assert saved["ncu"]["available"] is False
    assert saved["variants"][0]["status"] == "ok"
