"""Sample history runs, shaped like records.from_run's, with only what a test needs to vary."""

from __future__ import annotations

import pytest


def _row(name: str = "naive", median: float = 100.0, spread: float = 2.0, status: str = "ok",
             problem: str = "1_2_64_16_bf16", **counts) -> dict:
    device = {"median": median, "p25": median - spread, "p75": median + spread, "method": "cuda-graph"}
    return {"name": name, "problem": problem, "status": status, "reason": None if status == "ok" else "no",
            "device_us": device if status == "ok" else None, "latency_us": None, "host_us": None,
            "peak_memory_bytes": None, "max_abs_error": None,
            **{"gpu_ops": 7, "kernels": 5, "memcpy": 1, "memset": 1, "aten_ops": None, "copies": None, **counts},
            "findings": []}


def _run(*rows: dict, torch: str = "2.11.0", gpu: str = "NVIDIA H200", kind: str = "run") -> dict:
    rows = rows or (_row(),)
    environment = {"torch": torch, "gpu": gpu, "cuda": "12.8"}
    return {"id": 0, "time": "2026-11-30T00:00:00Z", "command": "attnprof run", "kind": kind,
            "device": {"type": "cuda", "name": gpu}, "device_kind": f"cuda:{gpu}",
            "problem": " + ".join(sorted({r["problem"] for r in rows})), "environment": environment,
            "run_dir": None, "variants": list(rows)}


@pytest.fixture
def db(tmp_path):
    return tmp_path / "history.sqlite"


@pytest.fixture
def make_row():
    return _row


@pytest.fixture
def make_run():
    return _run
