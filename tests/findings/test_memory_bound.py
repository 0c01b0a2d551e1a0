"""memory-bound: decode calls move the KV cache; bytes from the recorded shapes, within 5% of the cache."""

from __future__ import annotations

import pytest

from attnprof.analysis.attribution import analyze_trace
from attnprof.findings import memory_bound
from attnprof.findings.run_facts import BARE, RunFacts
from attnprof.trace.reader import load
from support import H200, h200_trace

CACHE = 2 * 8 * 8 * 8192 * 128 * 2  # K and V: B=8, 8 KV heads, 8192 tokens, D=128, bf16


def check(path, facts: RunFacts = BARE) -> list[dict]:
    return memory_bound.check(analyze_trace(load(path)), facts)


@pytest.mark.parametrize("variant", ["sdpa-cudnn", "flex", "sdpa-flash"])
def test_decode_moves_the_cache(variant):
    [f] = check(H200 / f"decode_8_32_8_8192_128_bf16_{variant}.json.gz")
    ev = f["evidence"]
    assert ev["bytes"] == pytest.approx(CACHE, rel=0.05) and ev["intensity_flop_per_byte"] < 5
    assert ev["achieved_bytes_per_s"] == pytest.approx(ev["bytes"] / (ev["time_us"] * 1e-6))
    assert ev["peak_bytes_per_s"] is None and ev["fraction"] is None  # a bare trace cannot know the ceiling


def test_a_run_rates_it_against_the_measured_copy_ceiling():
    ceiling = RunFacts(copy_bytes_per_s=4.24e12)
    [fast] = check(H200 / "decode_8_32_8_8192_128_bf16_sdpa-cudnn.json.gz", ceiling)
    [slow] = check(H200 / "decode_8_32_8_8192_128_bf16_flex.json.gz", ceiling)
    assert "of this device's measured copy bandwidth (4.24 TB/s)" in slow["message"]
    assert fast["evidence"]["fraction"] > 0.8 and fast["severity"] == "info"
    assert slow["evidence"]["fraction"] < 0.5 and slow["severity"] == "warn" and slow["cost_us"] > fast["cost_us"]


@pytest.mark.parametrize("path", [h200_trace("sdpa-cudnn"), H200 / "gqa_2_32_8_2048_128_bf16_sdpa-auto.json.gz",
                                  H200 / "window256_4_16_4096_64_bf16_flex.json.gz"], ids=lambda p: p.name)
def test_a_prefill_is_not_memory_bound(path):
    assert check(path) == []
