"""attnprof: what every attention implementation in PyTorch really does on the GPU."""

from __future__ import annotations

# The verbs live in fix/ and api.py, so no submodule of this package shares a name with a function
# bound here (importing `attnprof.expect` as a module would rebind `attnprof.expect`).
from attnprof.api import analyze, lint, run
from attnprof.fix.expect import expect
from attnprof.fix.inplace.runtime import patch

__version__ = "0.1.0"
__all__ = ["analyze", "expect", "lint", "patch", "run"]
