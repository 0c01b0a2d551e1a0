"""attnprof: what every attention implementation in PyTorch really does on the GPU."""

from __future__ import annotations

# The verbs live in fix/ and api.py, so no submodule of this package shares a name with a function
# bound here (importing `attnprof.expect` as a module would rebind `attnprof.expect`).
from attnprof.api import analyze, lint, run
from attnprof.fix.expect import expect
from attnprof.fix.inplace.runtime import patch
from attnprof.integrations.profiler import on_trace_ready
from attnprof.version import __version__

__all__ = ["__version__", "analyze", "expect", "lint", "on_trace_ready", "patch", "run"]
