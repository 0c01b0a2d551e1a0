"""What a run knows that its trace does not, handed to every rule as `check(analysis, facts)`: the device's
measured copy ceiling, the share of score tiles the problem's mask empties, the unit the region is (a forward
or a training step), and the timing measured outside the profiler. A bare trace (`attnprof analyze`) gives
`BARE`: every fact None, and the rules read what the trace alone says.

From the timing and the trace together (`measured`): the profiler's inflation of host time (the region's
host time in the trace against the same work timed outside it: wall time per call on the CPU, host time
to issue a call on a GPU) and whether costs read from the trace can be trusted as µs; the GPU's busy time
and idle share (timed back to back, the device time is the host's pace when the host is slower, and the
idle share decides host-bound).
"""

from __future__ import annotations

from dataclasses import dataclass

TRUSTED_INFLATION = 1.25
IDLE_BOUND = 0.25  # the GPU idles a quarter of a back-to-back forward or more: the host sets the pace


@dataclass(frozen=True)
class RunFacts:
    copy_bytes_per_s: float | None = None  # the device's measured copy bandwidth (read + write)
    masked_tile_share: float | None = None  # of the 128x128 score tiles, the share the mask empties
    unit: str | None = None  # "forward" or "step" (the run knows its mode); None: what the trace shows
    timing: dict | None = None  # {"device_us": {"median", "method"}, "host_us", "cpu_bound"} outside the profiler


BARE = RunFacts()


def measured(per_forward: dict, timing: dict) -> dict:
    """The trace's numbers next to the timing measured without the profiler: `profiler` (inflation and
    whether trace costs are trusted), `gpu_busy_us`, `gpu_idle_share` and the host-bound verdict `cpu_bound`,
    plus `forward_us`, the profiled forward a finding's share is taken of."""
    device = timing.get("device_us") or {}
    method, on_cpu = device.get("method"), device.get("method") == "cpu-wall"
    host = device.get("median") if on_cpu else timing.get("host_us")
    profiled = per_forward.get("cpu_time_us")
    inflation = round(profiled / host, 2) if profiled and host else None
    trusted = not on_cpu or (inflation is not None and inflation <= TRUSTED_INFLATION)
    facts = {"profiler": {"region_host_us": profiled, "measured_host_us": host, "inflation": inflation,
                          "basis": "wall time per call" if on_cpu else "host time to issue a call",
                          "costs_trusted": trusted},
             "cpu_bound": timing.get("cpu_bound"),
             "forward_us": profiled if on_cpu else per_forward.get("gpu_time_us")}
    if not on_cpu and method:
        busy, median = per_forward.get("gpu_time_us"), device.get("median")
        idle = round(max(0.0, 1 - busy / median), 3) if busy and median else None
        facts |= {"gpu_busy_us": busy, "gpu_idle_share": idle}
        if method == "back-to-back" and idle is not None and timing.get("host_us") is not None:
            facts["cpu_bound"] = idle >= IDLE_BOUND
    return facts
