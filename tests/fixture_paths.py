"""Where the committed fixtures are; test files in every stage folder import these (tests/ is on pythonpath)."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
H200 = FIXTURES / "h200"  # recorded on an H200 with benchmarks/record_traces.py (torch 2.11, cuDNN 9.19)
CPU = FIXTURES / "cpu"  # recorded on CPU with the same script (torch 2.13)


def h200_trace(variant: str) -> Path:
    return H200 / f"8_16_1024_64_bf16_{variant}.json.gz"


def cpu_trace(variant: str) -> Path:
    return CPU / f"1_2_64_32_bf16_{variant}.json.gz"
