"""exposed-comm: communication the GPU waits for, with no compute kernel running beside it.

In ring attention (context parallelism) each rank sends its K/V block on while it computes
attention on the one it holds; a transfer that outlasts that computation, or that nothing was
scheduled beside, adds its whole length to the step. Measured on one rank's trace alone: the
union of each step's NCCL kernel intervals minus the time any other kernel ran on that GPU
(analysis.comm), not summed durations, which would count overlapping collectives twice.
"""

from __future__ import annotations

from attnprof.analysis.attribution import STEP_REGION, Analysis
from attnprof.analysis.comm import all_instances, has_comm, is_nccl, median_facts, names_passing
from attnprof.findings import _common as c
from attnprof.units import count, us

MIN_SHARE = 0.01  # exposed communication under 1% of the step is noise, not a finding


def region_unit(a: Analysis) -> str:
    """What one instance is called in a message: a step for profiler steps, else the region's name."""
    return "step" if a.region == STEP_REGION else f"'{a.region}'"


def comm_medians(a: Analysis) -> dict:
    """The per-instance communication facts (medians), once per analysis: two rules read them."""
    return c.per(a, "comm medians", a, lambda x: median_facts(all_instances(x)))


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    if not a.has_gpu or not has_comm(a):
        return []
    m = comm_medians(a)
    exposed, span = m["exposed_comm_us"], m["span_us"]
    if exposed <= max(MIN_SHARE * span, 1.0):
        return []
    names = names_passing(a, is_nccl)
    info = a.trace.distributed_info or {}
    evidence = {"rank": info.get("rank"), "world_size": info.get("world_size"),
                "nccl_kernels_per_instance": m["nccl_kernels"], "comm_us": m["comm_us"],
                "exposed_comm_us": exposed, "overlap_fraction": m["overlap_fraction"],
                "compute_us": m["compute_us"], "span_us": span,
                "nccl_kernels": {n: c.per_fwd(k, a) for n, k in sorted(names.items(), key=lambda kv: -kv[1])}}
    share = exposed / span if span else 0.0
    message = (f"{us(exposed)} of {us(m['comm_us'])} communication per {region_unit(a)} runs with no compute "
               f"kernel on the GPU ({share:.0%} of its {us(span)}; overlap {m['overlap_fraction']:.0%}, "
               f"{count(m['nccl_kernels'])} NCCL kernels): the step waits for it")
    fix = ("hide the transfers under compute: with context parallelism try the other rotate method "
           "(`set_rotate_method('alltoall')` passes one K/V block per ring step, overlapped with that step's "
           "attention; 'allgather' fetches them all at once), give each rank more attention per transfer "
           "(a longer sequence per rank, fewer ranks), and balance causal work (load balancing) so no rank waits "
           "for a slower one; for other collectives, issue them earlier on their own stream (bucketing, prefetch)")
    severity = "warn" if share >= c.WARN_SHARE else "info"
    return [c.finding("exposed-comm", severity, message, evidence, fix, exposed)]


RULE = c.Rule("exposed-comm", scope="forward", waste=True, check=check)
