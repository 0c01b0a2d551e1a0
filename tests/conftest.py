"""Shared test setup: GPU-only tests carry the `cuda` marker and skip cleanly without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
H200 = FIXTURES / "h200"  # recorded on an H200 with benchmarks/record_traces.py (torch 2.11, cuDNN 9.19)
CPU = FIXTURES / "cpu"  # recorded on CPU with the same script (torch 2.13)


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def h200_trace(variant: str) -> Path:
    return H200 / f"8_16_1024_64_bf16_{variant}.json.gz"


def cpu_trace(variant: str) -> Path:
    return CPU / f"1_2_64_32_bf16_{variant}.json.gz"
