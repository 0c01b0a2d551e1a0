"""The trace-only commands import NumPy with one BLAS thread (OpenBLAS would start one per core, each
spinning ~0.1 s: 1.9 s of CPU per `attnprof analyze` on 16 cores); commands that run torch, and a user's
own setting, are left as they are; `import attnprof` imports no NumPy at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support import h200_trace

# the host process's own arguments say nothing: the command main() is given decides
_RUN_CLI = """
import contextlib, io, json, os, sys
from attnprof.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    main(sys.argv[2:])
import numpy
threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else None
print(json.dumps({"setting": os.environ.get("OPENBLAS_NUM_THREADS"), "threads": threads}))
"""


def _cli_ran(*command: str, **env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    proc = subprocess.run([sys.executable, "-c", _RUN_CLI, "analyze", *command], capture_output=True, text=True,
                          timeout=120, check=True, env={**clean, **env})
    return json.loads(proc.stdout)


def test_trace_commands_import_numpy_with_one_thread():
    seen = _cli_ran("analyze", "--json", str(h200_trace("naive")))
    assert seen["setting"] == "1"
    if seen["threads"] is not None:  # Linux: this process's threads, BLAS's among them
        assert seen["threads"] == 1


def test_torch_commands_and_the_users_setting_are_left_alone():
    assert _cli_ran("lint", "no_such_file.py:factory")["setting"] is None  # the host's argv[1] is "analyze"
    assert _cli_ran("analyze", "--json", str(h200_trace("naive")), OPENBLAS_NUM_THREADS="3")["setting"] == "3"


def test_import_attnprof_imports_no_numpy():
    proc = subprocess.run([sys.executable, "-c", "import sys, attnprof; print('numpy' in sys.modules)"],
                          capture_output=True, text=True, timeout=120, check=True)
    assert proc.stdout.strip() == "False"
