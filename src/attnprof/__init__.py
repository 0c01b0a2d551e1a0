"""attnprof: what every attention implementation in PyTorch really does on the GPU."""

from __future__ import annotations

from importlib import import_module

# The verbs live in fix/, integrations/ and api.py, so no submodule of this package shares a name with a
# function bound here (importing `attnprof.expect` as a module would rebind `attnprof.expect`).
from attnprof.api import analyze, lint, run
from attnprof.version import __version__

# bound on first use: `attnprof analyze` and every rank's analysis start without importing the fix/ and
# integrations/ code these pull in (~0.1 s of each run's start)
_LAZY = {"expect": "attnprof.fix.expect", "patch": "attnprof.fix.inplace.runtime",
         "on_trace_ready": "attnprof.integrations.profiler"}

__all__ = ["__version__", "analyze", "expect", "lint", "on_trace_ready", "patch", "run"]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'attnprof' has no attribute {name!r}")
