"""What the profiled trace's numbers mean next to the timing measured without the profiler.

- Profiler inflation: the forward's host time in the trace (its record_function range) against the
  same host work timed outside the profiler: wall time per call on the CPU, host time to issue a
  call on a GPU. The profiler adds per-op overhead on the host, so on the CPU, where the host does
  the work, a cost read from the trace can exceed the whole measured call.
- Finding costs come from the trace. A GPU kernel's duration is what the kernel took (the profiler's
  overhead is on the host), so GPU costs stand; host-time costs are also given as a share of the
  profiled forward, and `cost_trusted` is False when the inflation exceeds TRUSTED_INFLATION: reports
  then show the share, not the µs.
- GPU busy time: the trace's GPU time per forward. Device time timed back to back (where graph
  capture was refused) is the host's pace when the host is slower; the GPU's idle share (1 - busy /
  back-to-back time) says so, and the host-bound verdict comes from it.
- cpu-bound only from host time measured outside the profiler (findings.cpu_bound.from_timing).
"""

from __future__ import annotations

from attnprof.findings import cpu_bound, rank

TRUSTED_INFLATION = 1.25
IDLE_BOUND = 0.25  # the GPU idles a quarter of a back-to-back forward or more: the host sets the pace


def reconcile(record: dict) -> None:
    """Add `profiler` (inflation), `gpu_busy_us`, `gpu_idle_share`, the cost shares, and cpu-bound."""
    pf, device = record.get("per_forward") or {}, record.get("device_us") or {}
    method, on_cpu = device.get("method"), device.get("method") == "cpu-wall"
    measured = device.get("median") if on_cpu else record.get("host_us")
    profiled = pf.get("cpu_time_us")
    inflation = round(profiled / measured, 2) if profiled and measured else None
    trusted = not on_cpu or (inflation is not None and inflation <= TRUSTED_INFLATION)
    record["profiler"] = {"region_host_us": profiled, "measured_host_us": measured, "inflation": inflation,
                          "basis": "wall time per call" if on_cpu else "host time to issue a call",
                          "costs_trusted": trusted}
    if not on_cpu and method:
        _gpu_busy(record, pf.get("gpu_time_us"), device)
    forward = profiled if on_cpu else pf.get("gpu_time_us")
    findings = [f for f in record.get("findings") or [] if f["id"] != "cpu-bound"] + cpu_bound.from_timing(record)
    for f in findings:
        f["share_of_forward"] = round(f["cost_us"] / forward, 4) if forward else None
        f["cost_trusted"] = trusted or f["id"] == "cpu-bound"  # that one is measured outside the profiler
    record["findings"] = rank(findings)  # the one ranking of findings (ties: warnings first, then rule order)


def _gpu_busy(record: dict, busy: float | None, device: dict) -> None:
    record["gpu_busy_us"] = busy
    median = device.get("median")
    idle = round(max(0.0, 1 - busy / median), 3) if busy and median else None
    record["gpu_idle_share"] = idle
    if device.get("method") == "back-to-back" and idle is not None and record.get("host_us") is not None:
        record["cpu_bound"] = idle >= IDLE_BOUND
