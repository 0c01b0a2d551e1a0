"""attnprof: what every attention implementation in PyTorch really does on the GPU."""

from __future__ import annotations

# Functions named like a module (expect) are bound after their module loads, so the import system
# never rebinds them; lint and patch live in modules of other names (linter, patch_fx) for that reason.
from .api import analyze, lint, run
from .expect import expect
from .patch_fx import patch

__version__ = "0.1.0"
__all__ = ["analyze", "expect", "lint", "patch", "run"]
