"""attnprof: what every attention implementation in PyTorch really does on the GPU."""

from __future__ import annotations

from importlib import import_module

from attnprof.version import __version__

# The verbs live in fix/, integrations/ and api.py, so no submodule of this package shares a name with a
# function bound here (importing `attnprof.expect` as a module would rebind `attnprof.expect`). Each is
# bound on first use: `import attnprof` imports no NumPy (the CLI sets its BLAS threads first: cli/__init__),
# and `attnprof analyze` and every rank's analysis start without the fix/ and integrations/ code (~0.1 s)
_LAZY = {"analyze": "attnprof.api", "lint": "attnprof.api", "run": "attnprof.api", "expect": "attnprof.fix.expect",
         "patch": "attnprof.fix.rewrite", "on_trace_ready": "attnprof.integrations.profiler"}

__all__ = ["__version__", "analyze", "expect", "lint", "on_trace_ready", "patch", "run"]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'attnprof' has no attribute {name!r}")
