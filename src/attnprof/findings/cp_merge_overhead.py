"""cp-merge-overhead: the kernels ring attention adds besides attention and communication.

Each ring step computes attention of the local queries against one K/V block and then merges that
partial result into the running one (a rescale by the log-sum-exp, in float32 by default), with
concatenations and copies around it (`CatArrayBatchedCopy`, elementwise kernels). One GPU running
the whole sequence launches none of these. This rule names them and their time per step when a
trace shows ring attention's signature (analysis.ring: K/V exchanged around attention calls that run in
pieces), never for NCCL next to any kernel called attention: a data-parallel job's other kernels are not merges.
"""

from __future__ import annotations

from attnprof.analysis.attribution import Analysis
from attnprof.analysis.comm import has_comm, top_merge_kernels
from attnprof.analysis.ring import parallelism
from attnprof.findings import _common as c
from attnprof.findings.exposed_comm import comm_medians, region_unit
from attnprof.units import us

MIN_SHARE = 0.05  # merging under 5% of the attention time is the price of the ring, not a finding
TOP = 5


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    if not a.has_gpu or not has_comm(a) or not parallelism(a).ring_attention:
        return []
    m = comm_medians(a)
    merge, attention = m["merge_us"], m["attention_us"]
    if attention <= 0 or merge < MIN_SHARE * attention:
        return []
    top = top_merge_kernels(a, TOP)
    evidence = {"merge_us": merge, "attention_us": attention, "merge_over_attention": round(merge / attention, 4),
                "span_us": m["span_us"], "top_kernels": top,
                "parallelism": parallelism(a).as_dict()}
    names = ", ".join(f"{t['kernel']} {us(t['us_per_instance'])}" for t in top[:3])
    message = (f"{us(merge)} per {region_unit(a)} goes to kernels that are neither attention nor "
               f"communication ({merge / attention:.0%} of the attention time): the ring's merging of partial "
               f"results and copies ({names})")
    fix = ("fewer, larger ring steps merge less: a smaller context-parallel degree or a longer sequence per rank; "
           "the merge upcasts to float32 (`_cp_options.convert_to_f32`, keep it for accuracy); for many ranks, "
           "head-parallel attention (all-to-all over heads, Ulysses style) needs no merge at all")
    return [c.finding("cp-merge-overhead", c.severity(merge, a), message, evidence, fix, merge)]


RULE = c.Rule("cp-merge-overhead", scope="forward", waste=True, check=check)
