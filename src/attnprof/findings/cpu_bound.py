"""cpu-bound: the host needs longer to issue a forward than the GPU needs to run it.

Then launch overhead sets the pace: the GPU idles between kernels waiting for the next launch, and
faster kernels change nothing. The verdict needs host time measured outside the profiler (which
adds overhead per op, so a trace alone always overstates the host): the runner decides it from its
timing, so this rule has no trace check. With CUDA-graph replay the device time is the GPU's own,
and the call is host-bound when issuing it takes longer; timed back to back (graph capture refused),
the device time is the host's pace too, and the GPU's busy time from the trace and its idle share
decide (harness.reconcile).
"""

from __future__ import annotations

from attnprof.findings import _common as c
from attnprof.units import us

FIX = ("issue less host work per forward: capture it in a CUDA graph (torch.cuda.graphs, or "
       "torch.compile(mode='reduce-overhead')), use fused kernels (fewer launches), or give each call more work")


def from_timing(record: dict) -> list[dict]:
    """The finding for one run record whose timing says host-bound (`cpu_bound`), else []."""
    if not record.get("cpu_bound"):
        return []
    device, host = record.get("device_us") or {}, record["host_us"]
    replayed = device.get("method") == "cuda-graph"
    busy = device["median"] if replayed else record.get("gpu_busy_us")
    if not busy:
        return []
    idle = record.get("gpu_idle_share")
    evidence = {"host_time_us": host, "gpu_busy_us": busy, "device_method": device.get("method"),
                "gpu_idle_share": idle, "host_over_gpu": round(host / busy, 3),
                "basis": "host time measured outside the profiler"}
    where = (f"the GPU's time by graph replay ({us(busy)})" if replayed else
             f"the GPU's busy time in the trace ({us(busy)}; back to back the GPU idles {idle:.0%} of the call)")
    message = (f"host-bound: issuing one call takes {us(host)} (measured outside the profiler), longer than "
               f"{where}: launch overhead sets the pace")
    return [c.finding("cpu-bound", "warn", message, evidence, FIX, host - busy)]


RULE = c.Rule("cpu-bound", scope="forward", waste=False)
