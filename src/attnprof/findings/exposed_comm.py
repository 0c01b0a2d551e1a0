"""exposed-comm: communication the GPU waits for, with no compute kernel running beside it.

A transfer that outlasts the computation beside it, or that nothing was scheduled beside, adds its whole
length to the step. Measured on one rank's trace alone: the union of each step's NCCL kernel intervals minus
the time any other kernel ran on that GPU (analysis.comm), not summed durations, which would count
overlapping collectives twice; the figures are medians over the region's instances (HTA's comm/compute
overlap is over the whole trace). The advice follows what the communication is for (analysis.ring): ring
attention's K/V exchanges (context parallelism), gradient all-reduce (data parallelism), parameter
all-gathers (FSDP/ZeRO), or point-to-point transfers with no attention next to them (pipeline stages,
embedding all-to-all).
"""

from __future__ import annotations

from attnprof.analysis.attribution import STEP_REGION, Analysis
from attnprof.analysis.comm import all_instances, has_comm, is_nccl, median_facts, names_passing
from attnprof.analysis.ring import Parallelism, parallelism
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
    job = parallelism(a)
    evidence["parallelism"] = job.as_dict()
    share = exposed / span if span else 0.0
    mostly = f", mostly {job.main_collective}" if job.main_collective else ""
    message = (f"{us(exposed)} of {us(m['comm_us'])} communication per {region_unit(a)} runs with no compute "
               f"kernel on the GPU ({share:.0%} of its {us(span)}; overlap {m['overlap_fraction']:.0%}, "
               f"{count(m['nccl_kernels'])} NCCL kernels{mostly}; medians per {region_unit(a)}): the step waits "
               "for it")
    severity = "warn" if share >= c.WARN_SHARE else "info"
    return [c.finding("exposed-comm", severity, message, evidence, advice(job), exposed)]


def advice(job: Parallelism) -> str:
    """How to hide the exposed communication, for what it is for."""
    if job.ring_attention:
        return ("hide the transfers under compute: with context parallelism try the other rotate method "
                "(`set_rotate_method('alltoall')` passes one K/V block per ring step, overlapped with that step's "
                "attention; 'allgather' fetches them all at once), give each rank more attention per transfer "
                "(a longer sequence per rank, fewer ranks), and balance causal work (load balancing) so no rank "
                "waits for a slower one")
    if job.main_collective == "AllReduce":
        return ("overlap the gradient all-reduce with the backward (data parallelism): DDP starts a bucket's "
                "all-reduce once all its gradients are ready, so let the first buckets fill early (`bucket_cap_mb`: "
                "smaller buckets start sooner, larger ones pay less latency each), pass "
                "`gradient_as_bucket_view=True` (no copy into the buckets), `static_graph=True` where the graph does "
                "not change and `find_unused_parameters=False`; with gradient accumulation all-reduce only on the "
                "last micro-batch (`no_sync()`); a larger batch per GPU gives each all-reduce more backward to hide "
                "under")
    if job.main_collective in ("AllGather", "ReduceScatter"):
        return ("prefetch parameters so each all-gather runs under the previous layer's compute (FSDP: "
                "`forward_prefetch=True`, `backward_prefetch=BackwardPrefetch.BACKWARD_PRE`; FSDP2: "
                "`set_modules_to_forward_prefetch`), and shard coarser units (fewer, larger collectives)")
    return ("issue the transfers ahead of their use on their own stream (prefetch), so compute runs beside them: "
            "an embedding all-to-all (recommendation models) can start for the next batch while this one computes "
            "(pipelined input dist); for pipeline stages, more micro-batches per step or an interleaved schedule "
            "shrink the bubbles")


RULE = c.Rule("exposed-comm", scope="forward", waste=True, check=check)
