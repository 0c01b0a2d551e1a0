"""cp-imbalance: ranks doing unequal attention work, so the others wait for the slowest.

With a causal mask and the sequence cut into N contiguous pieces, rank 0's queries see the fewest
keys and rank N-1's the most; in a ring every rank waits for the slowest at each exchange. Read
from several ranks' summaries together (analysis.distributed): each rank's compute and attention
time per step, the exposed communication (waiting shows up there), and the skew of step ends. Only where the
ranks show ring attention's signature (analysis.ring): a data-parallel job's ranks differ for other reasons,
and sharding the sequence is no advice for them.
"""

from __future__ import annotations

from attnprof.findings import _common as c
from attnprof.units import us

MIN_SPREAD = 0.10  # compute differing by under 10% between ranks is noise and clocks


def check_ranks(merged: dict) -> list[dict]:
    ranks = [r for r in merged["ranks"] if r.get("instances") and r.get("compute_us")]
    if len(ranks) < 2 or not all(r.get("ring_attention") for r in ranks):
        return []
    compute = {r["rank"]: r["compute_us"] for r in ranks}
    most, least = max(compute.values()), min(compute.values())
    if (most - least) < MIN_SPREAD * most:
        return []
    d = merged["distributed"]
    slowest = max(compute, key=compute.__getitem__)
    mean = sum(compute.values()) / len(compute)
    per_rank = [{k: r.get(k) for k in ("rank", "compute_us", "attention_us", "exposed_comm_us")} for r in ranks]
    evidence = {"slowest_rank": slowest, "imbalance": d.get("imbalance"), "skew_end_us": d.get("skew_end_us"),
                "per_rank": per_rank}
    message = (f"rank {slowest} computes {us(most)} per step, the lightest rank {us(least)} "
               f"({most / least:.2f}x): the others wait {us(most - mean)} per step on average")
    fix = ("balance the causal work: shard the sequence head-tail (context_parallel does it when "
           "`_cp_options.enable_load_balance` is True and the sequence divides by 2 x the ranks), so each rank "
           "holds an early and a late piece; if work is already equal, look on the slowest rank for other work "
           "(data loading, a throttled GPU)")
    span = (d.get("span_us") or {}).get("median") or most
    severity = "warn" if (most - mean) >= c.WARN_SHARE * span else "info"
    return [c.finding("cp-imbalance", severity, message, evidence, fix, most - mean)]


RULE = c.Rule("cp-imbalance", scope="ranks", waste=True, check_ranks=check_ranks)
