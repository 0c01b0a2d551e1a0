"""benchmarks/kernel/card_check_tables.py reads a card check's JSON into tables: its ratios are the per-round ones of
alternating rounds (triton_masks.alternating keeps each round's time), not ratios of medians."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

KERNEL_BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks" / "kernel"
sys.path.insert(0, str(KERNEL_BENCHMARKS))
from triton_masks import alternating  # noqa: E402


def _timed(times: dict) -> dict:
    """alternating() over functions whose 'time' in each round is the next of their given values."""
    rounds = {name: itertools.cycle(values) for name, values in times.items()}
    return alternating({name: (lambda n=name: n) for name in times}, len(next(iter(times.values()))),
                       timer=lambda fn: next(rounds[fn()]))


def test_speeds_are_medians_of_per_round_ratios_and_missing_parts_are_skipped(tmp_path):
    # per round cuDNN / ours = 1.2, 1.0, 1.25: median 1.2; the medians' ratio (12 / 11) would say 1.091
    forward = _timed({"ours": [10.0, 11.0, 12.0], "cudnn": [12.0, 11.0, 15.0]})
    backward = _timed({"ours": [20.0, 20.0, 20.0], "cudnn": [19.0, 19.0, 19.0], "ours_deterministic": [21.0] * 3})
    dense = {"batch": 4, "seq": 4096, "causal": True, "head_dim": 128, "forward_us": forward, "backward_us": backward}
    (tmp_path / "triton_vs_cudnn.json").write_text(json.dumps(
        {"device": "NVIDIA H100 80GB HBM3", "torch": "2.11", "triton": "3.6.0", "cudnn": 91900, "dense": [dense]}))
    done = subprocess.run([sys.executable, str(KERNEL_BENCHMARKS / "card_check_tables.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "| B4 S4096 D128 causal | 11.00 | 12.00 | 1.200 (1.000-1.250) | 20.00 | 19.00 | 0.950 (0.950-0.950) |" \
           in done.stdout
    assert "1.050 (1.050-1.050)" in done.stdout  # the deterministic backward's time over the default's
    assert "## d64" not in done.stdout and "B8 decode" not in done.stdout
