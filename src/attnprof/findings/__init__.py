"""Findings: what a trace shows about an attention implementation, each with its evidence.

Every rule lives in its own module, which declares `RULE = Rule(id, scope, waste, check)`; the
check is a pure function `check(analysis, facts) -> list[dict]` (facts: findings.run_facts) and returns at
most one finding, aggregated over the forwards (a whole model gives one `hidden-copy` listing its top
chains, not one per copy).
Adding a finding: one file here, its RULE in the tuple below, one test file in tests/findings/. A finding is
`{"id", "severity": "info"|"warn", "message", "evidence": {...}, "fix": str | None, "cost_us"}`,
where cost_us is the time per forward (per step) the finding stands for (GPU time on a GPU trace, host
time on a CPU trace; 0.0 for an informational finding: see _common.Rule); `run_findings` ranks by it,
the one ranking.
"""

from __future__ import annotations

from collections.abc import Callable

from attnprof.analysis.attribution import Analysis, per_forward
from attnprof.analysis.queries import drop_op_trees
from attnprof.findings import (
    cp_imbalance,
    cp_merge_overhead,
    cpu_bound,
    dense_mask,
    exposed_comm,
    fp32_gemm,
    fused_attention,
    gemm_alignment,
    gqa_expanded,
    hand_written_attention,
    hidden_copy,
    host_copy,
    launch_api,
    layout_copy,
    layout_transposes,
    mask_rebuilt,
    memory_bound,
    occupancy,
    safe_softmax,
    sdpa_dispatch,
    sm_underfill,
    source,
    tensor_cores,
)
from attnprof.findings._common import Rule
from attnprof.findings.run_facts import BARE, RunFacts, measured
from attnprof.findings.sdpa_dispatch import sdpa_backend

# the trace rules in the order ties are ranked, then the source-level rules (lint reads them from the code)
RULES: dict[str, Rule] = {r.id: r for r in (
    sdpa_dispatch.RULE, fused_attention.RULE, hidden_copy.RULE, layout_copy.RULE, host_copy.RULE, fp32_gemm.RULE,
    gemm_alignment.RULE, mask_rebuilt.RULE,
    safe_softmax.RULE, layout_transposes.RULE, tensor_cores.RULE, occupancy.RULE, launch_api.RULE,
    cpu_bound.RULE, exposed_comm.RULE, cp_merge_overhead.RULE, cp_imbalance.RULE,
    hand_written_attention.RULE, gqa_expanded.RULE, dense_mask.RULE, memory_bound.RULE, sm_underfill.RULE,
    *source.RULES,
)}
# rules about what one piece of code does; the others describe the forward as a whole
LOCAL_RULES = tuple(fid for fid, r in RULES.items() if r.scope == "local")
WASTES = frozenset(fid for fid, r in RULES.items() if r.waste)
_SEVERITY = {"warn": 0, "info": 1}

__all__ = ["LOCAL_RULES", "RULES", "WASTES", "Rule", "rank", "run_findings", "run_rank_findings", "sdpa_backend"]


def run_findings(analysis: Analysis, only: tuple[str, ...] | None = None, facts: RunFacts = BARE,
                 after_rule: Callable[[], None] = lambda: None) -> list[dict]:
    """Every rule's findings (or those of the rules named in `only`) given the run's `facts`, ranked: the
    costliest first (ties: warnings first, then the order of RULES). With the run's timing, each finding
    also has its share of the profiled forward and whether its µs can be trusted (the profiler's inflation).
    The rules that walk the op trees run first and the trees go after them; `after_rule` is called once each
    rule and the trees are gone (the pipeline's memory.trim: what they dropped is handed back)."""
    if not analysis.forwards:
        return []
    found = []
    for walks in (True, False):  # the order they run in: `rank` orders what they find
        for fid, rule in RULES.items():
            if rule.check and rule.walks_op_trees is walks and (only is None or fid in only):
                found += rule.check(analysis, facts)
                after_rule()
        if walks and drop_op_trees(analysis):
            after_rule()
    if facts.timing is not None:
        seen = measured(per_forward(analysis), facts.timing)
        forward, trusted = seen["forward_us"], seen["profiler"]["costs_trusted"]
        for f in found:
            f["share_of_forward"] = round(f["cost_us"] / forward, 4) if forward else None
            f["cost_trusted"] = trusted or f["id"] == "cpu-bound"  # that one is measured outside the profiler
    return rank(found)


def rank(found: list[dict]) -> list[dict]:
    """The costliest first; ties: warnings first, then the order of RULES."""
    order = {fid: i for i, fid in enumerate(RULES)}
    return sorted(found, key=lambda f: (-f["cost_us"], _SEVERITY[f["severity"]], order.get(f["id"], len(order))))


def run_rank_findings(merged: dict) -> list[dict]:
    """The findings of several ranks together (`attnprof.ranks/1`): the rules that need every rank,
    then each single-trace finding once, from the rank where it costs most, naming the ranks that have it."""
    found = [f for rule in RULES.values() if rule.check_ranks for f in rule.check_ranks(merged)]
    worst: dict[str, dict] = {}
    having: dict[str, list[int]] = {}
    for r in merged["ranks"]:
        for f in r.get("findings", []):
            having.setdefault(f["id"], []).append(r["rank"])
            if f["id"] not in worst or f["cost_us"] > worst[f["id"]]["cost_us"]:
                worst[f["id"]] = {**f, "rank": r["rank"]}
    return rank(found + [{**f, "ranks": having[fid]} for fid, f in worst.items()])

