"""Python child processes (sweep points, ranks, the process ncu watches) that import the attnprof running
them: `python -m` and `-c` put the current folder first on the import path, so an `attnprof/` folder
(or a `torch.py`) there would run in its place. The child drops it before importing anything."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

_DROP_CWD = "import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "


def python_running(module: str, function: str) -> list[str]:
    """`python -c ...` calling `module.function(sys.argv[1:])` and exiting with what it returns; append the
    child's arguments to the list."""
    return [sys.executable, "-c", f"{_DROP_CWD}from {module} import {function}; sys.exit({function}(sys.argv[1:]))"]


PR_SET_PDEATHSIG = 1  # linux/prctl.h
ORPHAN_POLL_S = 1.0


def die_with_parent() -> None:
    """End this process when the one that started it dies, even by SIGKILL (which runs no clean-up there):
    Linux's parent-death signal, else a thread that watches the parent's pid. A sweep's point process must
    not run on beside the sweep that a later `--resume` starts."""
    parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux: no prctl
        armed = False
    if os.getppid() != parent or parent == 1:  # it died before the signal was armed
        os._exit(1)
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent,), name="attnprof-orphan-watch", daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(ORPHAN_POLL_S)
    os._exit(1)
