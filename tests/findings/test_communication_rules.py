"""exposed-comm and cp-merge-overhead (one rank's trace alone) and cp-imbalance (several ranks together),
on SYNTHETIC rank traces with known figures (tests/synthetic_ranks.py) and on single-GPU H200 traces,
where none of them may fire."""

from __future__ import annotations

import json

import pytest

from attnprof.analysis.attribution import analyze_trace
from attnprof.findings import RULES, run_findings
from attnprof.pipeline.ranks import analyze_ranks
from attnprof.trace.reader import load, parse
from support import h200_trace
from synthetic_ranks import COMM_US, EXPOSED_US, MERGE_US, rank_trace, write_ranks

KEYS = {"id", "severity", "message", "evidence", "fix", "cost_us"}


def _one_rank(**kw) -> dict[str, dict]:
    a = analyze_trace(parse(json.dumps(rank_trace(0, 2, **kw)).encode()))
    return {f["id"]: f for f in run_findings(a)}


def test_the_three_rules_are_registered_with_their_scope():
    assert RULES["exposed-comm"].check and RULES["cp-merge-overhead"].check
    assert RULES["cp-imbalance"].scope == "ranks" and RULES["cp-imbalance"].check_ranks


def test_exposed_comm_is_named_from_one_ranks_trace_with_union_based_evidence():
    f = _one_rank()["exposed-comm"]
    assert set(f) == KEYS and f["fix"]
    assert f["cost_us"] == pytest.approx(EXPOSED_US)
    e = f["evidence"]
    assert e["rank"] == 0 and e["world_size"] == 2 and e["nccl_kernels_per_instance"] == 2
    assert e["comm_us"] == pytest.approx(COMM_US) and e["exposed_comm_us"] == pytest.approx(EXPOSED_US)
    assert f["severity"] == "warn"  # 150 of a 700 µs step
    assert "alltoall" in f["fix"]


def test_cp_merge_overhead_names_the_merge_kernels_and_their_time():
    f = _one_rank()["cp-merge-overhead"]
    assert f["cost_us"] == pytest.approx(MERGE_US)
    assert f["evidence"]["top_kernels"][0]["kernel"] == "CatArrayBatchedCopy"
    assert "CatArrayBatchedCopy" in f["message"]


@pytest.mark.parametrize("variant", ["sdpa-cudnn", "sdpa-flash", "naive"])
def test_no_communication_rule_fires_on_a_single_gpu_trace(variant):
    found = {f["id"] for f in run_findings(analyze_trace(load(h200_trace(variant))))}
    assert not found & {"exposed-comm", "cp-merge-overhead"}


def test_cp_imbalance_names_the_slowest_rank_and_what_the_others_wait(tmp_path):
    result = analyze_ranks(write_ranks(tmp_path, 2, extra_us=(0.0, 400.0)))
    f = {x["id"]: x for x in result["findings"]}["cp-imbalance"]
    assert f["evidence"]["slowest_rank"] == 1
    assert f["cost_us"] == pytest.approx(200.0)  # 950 against a mean of 750
    assert [r["rank"] for r in f["evidence"]["per_rank"]] == [0, 1]


def test_cp_imbalance_stays_quiet_when_the_ranks_do_equal_work(tmp_path):
    result = analyze_ranks(write_ranks(tmp_path, 2, extra_us=(0.0, 20.0)))
    assert "cp-imbalance" not in {f["id"] for f in result["findings"]}


def test_several_ranks_report_each_single_trace_finding_once_from_the_rank_where_it_costs_most(tmp_path):
    result = analyze_ranks(write_ranks(tmp_path, 3))
    exposed = [f for f in result["findings"] if f["id"] == "exposed-comm"]
    assert len(exposed) == 1 and exposed[0]["ranks"] == [0, 1, 2]
