"""gqa-expanded: K/V copied out to the query heads by hand (prefill and decode), not with enable_gqa."""

from __future__ import annotations

import pytest

from attnprof.analysis.attribution import analyze_trace
from attnprof.findings import gqa_expanded
from attnprof.trace.reader import load
from support import H200


def check(name: str) -> list[dict]:
    return gqa_expanded.check(analyze_trace(load(H200 / name)))


def test_decode_expanding_the_cache_writes_four_times_its_bytes():
    [f] = check("decode_8_32_8_8192_128_bf16_naive.json.gz")
    ev = f["evidence"]
    assert ev["copies_per_forward"] == 2  # K and V
    assert ev["bytes_per_forward"] == 2 * 8 * 32 * 8192 * 128 * 2  # widened to 32 heads, bf16
    assert f["severity"] == "warn" and f["cost_us"] == ev["time_us_per_forward"] > 0
    assert "enable_gqa=True" in f["fix"]


def test_prefill_expansion_is_found_too():
    [f] = check("gqa_2_32_8_2048_128_bf16_naive.json.gz")
    assert f["evidence"]["copies_per_forward"] == 2
    assert f["evidence"]["bytes_per_forward"] == 2 * 2 * 32 * 2048 * 128 * 2


@pytest.mark.parametrize("name", ["gqa_2_32_8_2048_128_bf16_sdpa-auto.json.gz",
                                  "decode_8_32_8_8192_128_bf16_sdpa-cudnn.json.gz",
                                  "decode_8_32_8_8192_128_bf16_sdpa-math.json.gz",
                                  "decode_8_32_8_8192_128_bf16_flex.json.gz", "8_16_1024_64_bf16_naive.json.gz"])
def test_enable_gqa_and_plain_heads_are_quiet(name):
    assert check(name) == []  # SDPA math expands inside SDPA: not the user's copy
