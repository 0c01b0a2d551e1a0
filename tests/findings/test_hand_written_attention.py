"""hand-written-attention on any trace: the eager Llama's and the naive variants', never where SDPA ran."""

from __future__ import annotations

from functools import cache

import pytest

from attnprof.analysis.attribution import analyze_trace
from attnprof.findings import hand_written_attention
from attnprof.trace.reader import load
from support import H200, cpu_trace, h200_trace


@cache
def found(path) -> list[dict]:
    return hand_written_attention.check(analyze_trace(load(path)))


def test_the_eager_llama_is_named_with_its_four_layers_and_their_share():
    [f] = found(H200 / "llama_fwd_eager.json.gz")
    ev = f["evidence"]
    assert f["severity"] == "warn" and ev["calls_per_forward"] == 4  # one per layer of the 4-layer model
    assert ev["chain"][0] == "aten::matmul" and "aten::softmax" in ev["chain"] and ev["chain"][-1] == "aten::matmul"
    assert 0 < ev["removable_us_per_forward"] < ev["time_us_per_forward"] and 0 < ev["share_of_region"] < 1
    assert [c["implementation"] for c in ev["attention_calls"]] == ["hand-written"]


def test_sdpa_is_not_hand_written():
    assert found(H200 / "llama_fwd_sdpa.json.gz") == []
    for variant in ("sdpa-math", "sdpa-cudnn", "flex"):
        assert found(h200_trace(variant)) == []


@pytest.mark.parametrize("path", [h200_trace("naive"), H200 / "train_4_16_1024_64_bf16_inplace.json.gz",
                                  H200 / "gqa_2_32_8_2048_128_bf16_naive.json.gz", cpu_trace("naive")],
                         ids=lambda p: p.name)
def test_the_naive_variants_are_named_in_forwards_steps_and_on_cpu(path):
    [f] = found(path)
    assert f["evidence"]["calls_per_forward"] == 1 and f["cost_us"] > 0


def test_scores_come_from_recorded_shapes():
    [f] = found(H200 / "gqa_2_32_8_2048_128_bf16_naive.json.gz")
    assert f["evidence"]["scores_dims"] == [2, 32, 2048, 2048]
    assert f["evidence"]["scores_bytes"] == 2 * 32 * 2048 * 2048 * 2
    assert f["evidence"]["gpu_activities_per_call"] >= 5
