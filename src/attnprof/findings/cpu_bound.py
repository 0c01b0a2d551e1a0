"""cpu-bound: the host needs longer to issue a forward than the GPU needs to run it.

Then launch overhead sets the pace: the GPU idles between kernels waiting for the next launch, and
faster kernels change nothing. The verdict needs host time measured outside the profiler (which
adds overhead per op, so a trace alone always overstates the host): a run hands its timing to the rule
as a fact (a bare trace has none: no finding). With CUDA-graph replay the device time is the GPU's own,
and the call is host-bound when issuing it takes longer; timed back to back (graph capture refused),
the device time is the host's pace too, and the GPU's busy time from the trace and its idle share
decide (findings.run_facts.measured).
"""

from __future__ import annotations

from attnprof.analysis.attribution import Analysis, per_forward
from attnprof.findings import _common as c
from attnprof.findings.run_facts import measured
from attnprof.units import us


def fix(each: str) -> str:
    return (f"issue less host work {each}: capture it in a CUDA graph (torch.cuda.graphs, or "
            "torch.compile(mode='reduce-overhead')), use fused kernels (fewer launches), or give each call more work")


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    """From the run's timing (none for a bare trace: []) and the trace's GPU busy time."""
    if facts.timing is None:
        return []
    return from_timing(facts.timing, measured(per_forward(a), facts.timing), c.per_unit(a, facts))


def from_timing(timing: dict, seen: dict, each: str = "per forward") -> list[dict]:
    """The finding when the measured timing and the trace (`facts.measured`) say host-bound, else []."""
    if not seen.get("cpu_bound"):
        return []
    device, host = timing.get("device_us") or {}, timing["host_us"]
    replayed = device.get("method") == "cuda-graph"
    busy = device["median"] if replayed else seen.get("gpu_busy_us")
    if not busy:
        return []
    idle = seen.get("gpu_idle_share")
    evidence = {"host_time_us": host, "gpu_busy_us": busy, "device_method": device.get("method"),
                "gpu_idle_share": idle, "host_over_gpu": round(host / busy, 3),
                "basis": "host time measured outside the profiler"}
    where = (f"the GPU's time by graph replay ({us(busy)})" if replayed else
             f"the GPU's busy time in the trace ({us(busy)}; back to back the GPU idles {idle:.0%} of the call)")
    message = (f"host-bound: issuing one call takes {us(host)} (measured outside the profiler), longer than "
               f"{where}: launch overhead sets the pace")
    return [c.finding("cpu-bound", "warn", message, evidence, fix(each), host - busy)]


RULE = c.Rule("cpu-bound", scope="forward", waste=False, check=check)
