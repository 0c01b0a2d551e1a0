"""attnprof: what every attention implementation in PyTorch really does on the GPU."""

from __future__ import annotations

from .api import analyze, run

__version__ = "0.1.0"
__all__ = ["analyze", "run"]
