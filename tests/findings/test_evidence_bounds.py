"""Evidence lists of one entry per distinct kernel or API name are bounded (findings._common.EVIDENCE_LISTED):
with the bound set below a fixture's list, a rule keeps the first entries of the full list in its order and
sums up the rest, and every total beside the list stays what the full list gives."""

from __future__ import annotations

from functools import cache

import pytest

from attnprof.analysis import attribution as analysis
from attnprof.findings import _common, fused_attention, launch_api, tensor_cores
from attnprof.trace import reader as trace
from attnprof.units import count
from support import H200

KEPT = 2


@cache
def load(name: str) -> analysis.Analysis:
    return analysis.analyze_trace(trace.load(H200 / f"{name}.json.gz"))


def full_and_cut(rule, name: str, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, dict]:
    a = load(name)
    full = rule.check(a)[0]
    monkeypatch.setattr(_common, "EVIDENCE_LISTED", KEPT)
    a.caches.clear()
    return full, rule.check(a)[0]


@pytest.mark.parametrize(("rule", "name"), [(tensor_cores, "llama_fwd_eager"),
                                            (fused_attention, "train_4_16_1024_64_bf16_flex")])
def test_kernel_lists_keep_the_most_time_and_sum_up_the_rest(rule, name, monkeypatch):
    full, cut = full_and_cut(rule, name, monkeypatch)
    rows, rest = full["evidence"]["kernels"], full["evidence"]["kernels"][KEPT:]
    assert len(rows) > KEPT and "kernels_not_listed" not in full["evidence"]
    assert cut["evidence"]["kernels"] == rows[:KEPT]
    summary = cut["evidence"].pop("kernels_not_listed")
    assert summary["distinct"] == len(rest)
    assert summary["per_forward"] == pytest.approx(sum(r["per_forward"] for r in rest), abs=1e-3 * len(rest))
    assert summary["time_us_per_forward"] == pytest.approx(sum(r["time_us_per_forward"] for r in rest),
                                                           abs=1e-3 * len(rest))
    assert {k: v for k, v in cut["evidence"].items() if k != "kernels"} == \
        {k: v for k, v in full["evidence"].items() if k != "kernels"}
    assert cut["cost_us"] == full["cost_us"]
    if rule is tensor_cores:  # (fused-attention's message describes its first three rows: here two are kept)
        assert cut["message"] == full["message"]


def test_launch_api_keeps_the_most_launched_calls_and_sums_up_the_rest(monkeypatch):
    full, cut = full_and_cut(launch_api, "llama_fwd_eager", monkeypatch)
    per = list(full["evidence"]["per_forward"].items())
    assert len(per) > KEPT and per == sorted(per, key=lambda kv: -kv[1])
    assert list(cut["evidence"]["per_forward"].items()) == per[:KEPT]
    summary = cut["evidence"].pop("per_forward_not_listed")
    assert summary["distinct"] == len(per) - KEPT
    assert summary["per_forward"] == pytest.approx(sum(n for _, n in per[KEPT:]), abs=1e-3 * len(per))
    assert {k: v for k, v in cut["evidence"].items() if k != "per_forward"} == \
        {k: v for k, v in full["evidence"].items() if k != "per_forward"}
    kept = ", ".join(f"{count(n)} {name}" for name, n in per[:KEPT])
    assert f"({kept}, {count(summary['distinct'])} more API names (" in cut["message"]
