"""attnprof: what every attention implementation in PyTorch really does on the GPU."""

from __future__ import annotations

__version__ = "0.1.0"
