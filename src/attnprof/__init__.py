"""attnprof: what every attention implementation in PyTorch really does on the GPU."""

from __future__ import annotations

# Functions named like a module (expect) are bound after their module loads, so the import system
# never rebinds them; lint and patch live in modules of other names (linter, patch_fx) for that reason.
from attnprof.api import analyze, lint, run
from attnprof.fix.expect import expect
from attnprof.fix.patch_runtime import patch

__version__ = "0.1.0"
__all__ = ["analyze", "expect", "lint", "patch", "run"]
