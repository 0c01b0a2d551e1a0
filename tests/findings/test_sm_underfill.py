"""sm-underfill: a dominant kernel whose grid leaves SMs idle; split-KV kernels recognised; full grids quiet."""

from __future__ import annotations

import gzip
import json

import pytest

from attnprof.analysis.attribution import analyze_trace
from attnprof.findings import sm_underfill
from attnprof.trace.reader import load
from support import H200, h200_trace


def check(path) -> list[dict]:
    return sm_underfill.check(analyze_trace(load(path)))


def with_grid(tmp_path, name: str, kernel: str, grid: list[int]):
    """The fixture with `kernel`'s grid shrunk, as a smaller batch would launch it."""
    with gzip.open(H200 / name) as f:
        doc = json.load(f)
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and kernel in e["name"]:
            e["args"]["grid"] = grid
    path = tmp_path / name.removesuffix(".gz")
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("path", [H200 / "decode_8_32_8_8192_128_bf16_sdpa-cudnn.json.gz",
                                  H200 / "decode_8_32_8_8192_128_bf16_sdpa-flash.json.gz",
                                  h200_trace("sdpa-cudnn"), h200_trace("naive")], ids=lambda p: p.name)
def test_grids_that_fill_the_h200_are_quiet(path):
    assert check(path) == []


def test_a_decode_kernel_of_64_blocks_on_132_sms_idles_most_of_them(tmp_path):
    [f] = check(with_grid(tmp_path, "decode_8_32_8_8192_128_bf16_sdpa-cudnn.json.gz", "flash_fprop", [1, 8, 8]))
    [row] = f["evidence"]["kernels"]
    assert row["blocks"] == 64 and row["blocks_at_once"] == 264 and row["waves"] == pytest.approx(64 / 264, abs=1e-3)
    assert not row["split_kv"] and f["severity"] == "warn" and "split-KV" in f["fix"]
    assert f["cost_us"] == pytest.approx(row["time_us_per_forward"] * (1 - 64 / 264), rel=1e-2)


def test_a_split_kv_kernel_is_recognised_and_a_tail_counts(tmp_path):
    [f] = check(with_grid(tmp_path, "decode_8_32_8_8192_128_bf16_sdpa-flash.json.gz", "splitkv_kernel", [1, 5, 64]))
    [row] = f["evidence"]["kernels"]
    assert row["split_kv"] and row["waves"] == pytest.approx(320 / 264, abs=1e-3)  # 1.2 waves: a short tail
    assert row["filled"] == pytest.approx(320 / 264 / 2, abs=1e-3) and "split-KV kernel" in f["message"]
