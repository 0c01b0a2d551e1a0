"""A FlashAttention kernel from the Hugging Face kernels hub (placeholder until the hub work lands)."""

from __future__ import annotations

VARIANTS: list = []
