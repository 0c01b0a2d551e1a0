"""Python child processes (sweep points, ranks, the process ncu watches) that import the attnprof running
them: `python -m` and `-c` put the current folder first on the import path, so an `attnprof/` folder
(or a `torch.py`) there would run in its place. The child drops it before importing anything."""

from __future__ import annotations

import sys

_DROP_CWD = "import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "


def python_running(module: str, function: str) -> list[str]:
    """`python -c ...` calling `module.function(sys.argv[1:])` and exiting with what it returns; append the
    child's arguments to the list."""
    return [sys.executable, "-c", f"{_DROP_CWD}from {module} import {function}; sys.exit({function}(sys.argv[1:]))"]
