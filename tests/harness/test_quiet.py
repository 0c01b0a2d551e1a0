"""torch's noise on stderr is kept from the user; everything else written there still arrives."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import os, sys, warnings
from attnprof.harness.quiet import CLEARS_EVENTS, quiet_stderr
with quiet_stderr():
    os.write(2, b"USDT:2026-11-30 11:48:27 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start\\n")
    os.write(2, b"kept from C\\n")
    print("kept from Python", file=sys.stderr, flush=True)
    warnings.warn(CLEARS_EVENTS + ". Only events from the current cycle will be reported.")
    os.write(2, b"USDT:2026-11-30 11:48:27 1:1 SyncActivityProfilerHandler.cpp:59] profiler_stop\\n")
print("after", file=sys.stderr)
"""


def test_usdt_lines_and_the_clears_events_warning_are_dropped_and_the_rest_kept():
    err = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60).stderr
    assert "USDT" not in err and "clears events" not in err
    assert err.splitlines() == ["kept from C", "kept from Python", "after"]


SPLIT = """
import os, time
from attnprof.harness.quiet import quiet_stderr
with quiet_stderr():
    os.write(2, b"USDT:2026-11-30 11:48:27 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start")
    time.sleep(0.2)  # the relay reads the line before its end arrives
    os.write(2, b"\\n")
    os.write(2, b"kept\\n")
"""


def test_a_noise_line_whose_end_comes_apart_leaves_no_blank_line():
    err = subprocess.run([sys.executable, "-c", SPLIT], capture_output=True, text=True, timeout=60).stderr
    assert err == "kept\n"


def test_a_real_profiler_run_prints_no_usdt_line():
    code = ("import torch; from attnprof.harness.profiling import profiler\n"
            "with profiler(False, schedule=(0, 1, 1)) as p:\n"
            "    for _ in range(2): torch.ones(4).sum(); p.step()\n")
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stderr
    assert "USDT" not in err and "Traceback" not in err
    assert not err.strip() or "\n\n" not in "\n" + err  # no blank line (kineto's line ends came apart)
