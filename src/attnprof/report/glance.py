"""The article's at-a-glance column, "what the trace revealed", shared by every report."""

from __future__ import annotations

from attnprof.findings import WASTES
from attnprof.units import us


def revealed(record: dict) -> str:
    """One line per variant: the backend that ran, the fused kernel and its occupancy, the wastes
    with their cost, and whether the host sets the pace (from the timing, not the profiled trace,
    since the profiler itself slows the host)."""
    if record.get("status") != "ok":
        return record.get("reason") or ""
    findings = {f["id"]: f for f in record.get("findings") or []}
    parts = []
    if record.get("backend") and record["name"].startswith("sdpa"):
        parts.append(f"ran {record['backend']}")
    fused = _fused_kernel(findings)
    if fused:
        parts.append(fused)
    for fid, f in findings.items():
        if fid in WASTES or (f["severity"] == "warn" and fid not in ("cpu-bound", "sdpa-dispatch")):
            parts.append(f"{fid} ({us(f.get('cost_us'))}/fwd)")
    if record.get("cpu_bound"):
        parts.append(f"cpu-bound (host {us(record.get('host_us'))} ≥ device "
                     f"{us((record.get('device_us') or {}).get('median'))} per call)")
    return ", ".join(parts)


def _fused_kernel(findings: dict) -> str | None:
    """`FlashAttention-2, 12.5% occupancy` for the fused attention kernel, if there is one."""
    kernels = (findings.get("fused-attention") or {}).get("evidence", {}).get("kernels") or []
    if not kernels:
        return None
    kernel = kernels[0]
    occupancy = {k["name"]: k for k in (findings.get("occupancy") or {}).get("evidence", {}).get("kernels", [])}
    occ = occupancy.get(kernel["name"])
    text = kernel.get("family") or kernel.get("short") or "fused kernel"
    if occ and occ.get("theoretical_occupancy") is not None:
        text += f", {occ['theoretical_occupancy'] * 100:.4g}% occupancy"
        if occ.get("cupti_gap"):
            text += " (CUPTI reads 0%: a gap for driver-API launches)"
    return text
