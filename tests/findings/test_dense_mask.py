"""dense-mask: SDPA given a materialized window mask; not flex with a block mask, not is_causal."""

from __future__ import annotations

import pytest

from attnprof.analysis.attribution import analyze_trace
from attnprof.findings import dense_mask
from attnprof.findings.run_facts import BARE, RunFacts
from attnprof.problem import Problem
from attnprof.trace.reader import load
from support import H200


def check(name: str, facts: RunFacts = BARE) -> list[dict]:
    return dense_mask.check(analyze_trace(load(H200 / name)), facts)


@pytest.mark.parametrize("name,backend", [("window256_4_16_4096_64_bf16_sdpa-auto-dense.json.gz", "cudnn"),
                                          ("window256_4_16_4096_64_bf16_sdpa-efficient-dense.json.gz", "efficient")])
def test_sdpa_with_a_dense_window_mask(name, backend):
    [f] = check(name)
    ev = f["evidence"]
    assert ev["mask_dims"] == [4096, 4096] and ev["mask_bytes"] == 4096 * 4096 and ev["backend"] == backend
    assert f["severity"] == "warn" and "block mask" in f["fix"] and ev["time_us_per_forward"] > 0


@pytest.mark.parametrize("name", ["window256_4_16_4096_64_bf16_flex.json.gz", "8_16_1024_64_bf16_sdpa-cudnn.json.gz",
                                  "gqa_2_32_8_2048_128_bf16_sdpa-auto.json.gz"])
def test_a_block_mask_or_is_causal_is_quiet(name):
    assert check(name) == []


def test_a_run_adds_the_share_of_tiles_the_window_empties_and_its_cost():
    problem = Problem(batch=4, heads=16, seq=4096, head_dim=64, mask="window=256", dense_mask=True)
    name = "window256_4_16_4096_64_bf16_sdpa-auto-dense.json.gz"
    [bare] = check(name)
    [f] = check(name, RunFacts(masked_tile_share=problem.masked_tile_share()))
    share = f["evidence"]["masked_tile_share"]
    assert bare["cost_us"] == 0.0 and bare["evidence"]["masked_tile_share"] is None
    assert share == pytest.approx(problem.masked_tile_share(), abs=1e-4) and 0.9 < share < 1
    assert f["cost_us"] == pytest.approx(f["evidence"]["time_us_per_forward"] * share, rel=1e-3)
    assert f"empties {share:.0%} of the 128x128 score tiles" in f["message"]
