"""The article's at-a-glance column, "what the trace revealed", shared by every report."""

from __future__ import annotations

from attnprof.analysis.noise import compare
from attnprof.analysis.regions import HALF
from attnprof.findings import WASTES
from attnprof.report.text import NAME_LIMIT, printable
from attnprof.units import count, mib, sig, spread, us

# Above this max error against the float64 reference a variant is not counted as correct: about four
# units in the last place of 1.0 in the run's dtype (bf16 keeps 8 bits of mantissa, fp16 11, fp32 24)
MAX_ERROR = {"bf16": 4 * 2.0**-7, "fp16": 4 * 2.0**-10, "fp32": 4 * 2.0**-23 * 64}


# The profiler's inflation of host time past which a CPU run measured the machine's other work, not the
# variants: profiling costs a few times the host time of small ops; 291x was `--threads 2` beside other work
# on a 2-core machine (issue 43), where the same run's "48.7x the speed" was the load's, not the code's.
UNUSABLE_INFLATION = 20.0


def unusable(results: dict) -> str | None:
    """Why the run's times say nothing about the variants (a machine too busy to measure on), or None."""
    inflations = [(r["name"], p["inflation"]) for r in results["variants"]
                  if (p := r.get("profiler") or {}).get("inflation") and p["inflation"] >= UNUSABLE_INFLATION]
    if not inflations:
        return None
    name, worst = max(inflations, key=lambda x: x[1])
    load = results.get("load") or {}
    busy = (f"; load average {load['max_load_average']:.1f} on {load['cores']} cores while timing"
            if load.get("max_load_average") and load.get("cores") else "")
    threads = results["device"].get("threads")
    fewer = f" with fewer --threads than {threads}" if threads and threads > 1 else ""
    return (f"unusable run: the profiler slowed {name}'s host time {sig(worst)}x (other work shared the machine"
            f"{busy}): its times and any speed-up between them measure the load, not the code; no fastest is "
            f"named. Run again on an idle machine{fewer}")


def verdict(results: dict) -> str | None:
    """The line after the table: the fastest correct variant (or the variants the fastest cannot be told
    from: within the noise of each other, by the one verdict, noise.compare), its speed-up over the slowest
    correct one where that is beyond both spreads, and its share of the measured roof it sits under (None
    when no variant ran correctly). The user's module (`--target`) runs its own problem: never in this line.
    A run too loaded to measure anything says so instead (`unusable`)."""
    if why := unusable(results):
        return why
    bound = MAX_ERROR.get(results["problem"].get("dtype"), float("inf"))
    correct = sorted((r for r in results["variants"] if r["status"] == "ok" and r.get("family") != "target"
                      and (r.get("device_us") or {}).get("median") and (r.get("max_abs_error") or 0) <= bound),
                     key=lambda r: r["device_us"]["median"])
    if not correct:
        return None
    fast, slow = correct[0], correct[-1]
    tied = within_noise_of_fastest(correct)
    if tied:
        names = ", ".join(f"{r['name']} {spread(r['device_us'])}" for r in [fast, *tied])
        text = f"fastest: none beyond the noise: {names} are within the noise of each other (inside both spreads)"
    else:
        text = f"fastest: {fast['name']}, {spread(fast['device_us'])}"
    if slow is not fast and slow not in tied:
        ratio = slow["device_us"]["median"] / fast["device_us"]["median"]
        text += f", {sig(ratio)}x the speed of {slow['name']} (the slowest correct variant, beyond both spreads)"
    roof = fast.get("roofline") or {}
    if roof.get("bound") and not tied:
        roof_name = "matmul" if roof["bound"] == "compute" else "copy"
        share = roof.get("pct_of_matmul" if roof_name == "matmul" else "pct_of_copy")
        text += f"; {count(share)}% of the measured {roof_name} ceiling, {roof['bound']}-bound"
    return text


def target_line(record: dict) -> str:
    """The user's module (`run --target`) alone: the problem it ran (its own inputs, parameters and projections:
    not the run's, which it ignores), its time with the spread and its error against a float64 run of itself;
    never compared with the variants, whose problem is another."""
    own = record.get("own_problem") or {}
    inputs = "; ".join(f"{x['name']} {x['shape']} {x['dtype']}" for x in own.get("inputs") or []) or "no tensor inputs"
    params = own.get("parameters")
    weights = (f"; {count(params)} parameters ({', '.join(own.get('parameter_dtypes') or [])})" if params else "")
    proj = own.get("projections") or []
    more = f" and {own['projections_not_listed']} more" if own.get("projections_not_listed") else ""
    proj_text = f"; projections {', '.join(proj)}{more}" if proj else ""
    head = f"your module {record['name']}, on its own problem (inputs {inputs}{weights}{proj_text})"
    if record["status"] != "ok":
        return f"{head}: {record['status']}, {record.get('reason') or ''}".rstrip(", ")
    err = record.get("max_abs_error")
    checked = (f"max error {sig(err)} against {record.get('error_against')}" if err is not None
               else f"error unchecked: {record.get('error_against') or 'no float64 run of it'}")
    return f"{head}: {spread(record.get('device_us'))} per call, {checked}; not compared with the variants"


def memory_line(record: dict) -> str | None:
    """A call's memory peak above what it starts with (its inputs, weights) and the ops holding it then,
    from its memory pass (harness.memory_view); None without one."""
    mem = record.get("memory")
    if not mem or record.get("status") != "ok":
        return None
    held = ", ".join(f"{h['op']} {mib(h['bytes'])}" for h in mem["held_by"])
    return f"peak {mib(mem['peak_bytes'])} above its inputs" + (f", held by {held}" if held else "")


def within_noise_of_fastest(by_time: list[dict]) -> list[dict]:
    """Of records sorted by median device time, those after the first whose time is within the noise of
    the first's (noise.compare): the first is the fastest only when this is empty."""
    return [r for r in by_time[1:] if compare(by_time[0]["device_us"], r["device_us"])["verdict"] == "no change"]


def fastest_cell(records: list[dict]) -> str:
    """A sweep point's fastest variant, or the variants within the noise of each other."""
    ran = sorted((r for r in records if r.get("status") == "ok" and (r.get("device_us") or {}).get("median")),
                 key=lambda r: r["device_us"]["median"])
    if not ran:
        return "-"
    tied = within_noise_of_fastest(ran)
    return ran[0]["variant"] if not tied else "within the noise: " + ", ".join(r["variant"] for r in [ran[0], *tied])


def not_listed(record: dict, unit: str = "forward") -> str | None:
    """The line under a kernel table that the analysis cut (`kernels_not_listed`): what it leaves out."""
    rest = record.get("kernels_not_listed")
    if not rest:
        return None
    return (f"{count(rest['distinct'])} more distinct GPU activities ({count(rest['per_forward'])} per {unit}), "
            f"{us(rest['total_us'])} in all: not listed")


def coverage_lines(record: dict) -> list[tuple[str, bool]]:
    """What the region holds of the trace's GPU activities and what it leaves out (an analysis's
    `unattributed`), as plain text lines, each with whether it is to be said loudly (the region holds under
    half the GPU time): every view says them (the terminal, the HTML page)."""
    u = record.get("unattributed") or {}
    if not u.get("gpu_activities"):
        return []
    region = printable(repr(record.get("region")), NAME_LIMIT)
    outside, orphans = _counted(u["outside_regions"], u.get("outside_us")), _counted(u["orphans"], u.get("orphans_us"))
    lines = [(f"GPU activities: {count(u['attributed'])} of {count(u['gpu_activities'])} in region {region}; "
              f"{outside} launched outside it; {orphans} match no launch event; --json lists the largest of them "
              "(unattributed), --region picks another region ('(whole trace)': all)", False)]
    share = u.get("region_share")
    if share is not None and share < HALF:
        lines.insert(0, (f"region {region} holds only {share:.0%} of the trace's GPU time: the figures below "
                         "describe a small part of the work", True))
    return lines


def _counted(n: int, time_us: float | None) -> str:
    return f"{count(n)} ({us(time_us)})" if n else "0"


def in_shares(records: list[dict]) -> bool:
    """Whether a list of variants shows its costs as shares of the profiled call: when the profiler
    inflated any one's host time past trust, all of them, so one list has one unit."""
    return any((r.get("profiler") or {}).get("costs_trusted") is False for r in records)


def revealed(record: dict, shares: bool | None = None) -> str:
    """One line per variant: the backend that ran, the fused kernel and its occupancy, the wastes
    with their cost (as shares of the profiled call with `shares`; default: when this record's costs
    are not trusted), and whether the host sets the pace (from the timing, not the profiled trace,
    since the profiler itself slows the host)."""
    shares = in_shares([record]) if shares is None else shares
    if record.get("status") != "ok":
        return record.get("reason") or ""
    findings = {f["id"]: f for f in record.get("findings") or []}
    parts = []
    if record.get("backend") and record["name"].startswith("sdpa"):
        parts.append(f"ran {record['backend']}")
    phases = record.get("phases")
    if phases and phases["forward"].get("gpu_ops") is not None:
        parts.append(f"{phases['forward']['gpu_ops']} + {phases['backward']['gpu_ops']} GPU activities "
                     "(forward + backward)")
    fused = _fused_kernel(findings)
    if fused:
        parts.append(fused)
    per = "/step" if record.get("unit") == "step" else "/fwd"
    for fid, f in findings.items():
        if fid in WASTES or (f["severity"] == "warn" and fid not in ("cpu-bound", "sdpa-dispatch")):
            cost = cost_text(f, per, shares)
            parts.append(f"{fid} ({cost})" if cost else fid)
    if record.get("cpu_bound"):
        parts.append(_host_bound(record))
    elif (record.get("device_us") or {}).get("method") == "back-to-back" and record.get("gpu_busy_us"):
        parts.append(f"device time back to back (no graph capture): GPU busy {us(record['gpu_busy_us'])}, "
                     f"idle {100 * (record.get('gpu_idle_share') or 0):.0f}%")
    profiled = record.get("profiler") or {}
    if profiled.get("costs_trusted") is False:
        parts.append(f"the profiler slowed its host time {profiled['inflation']:g}x: costs are shares of the "
                     "profiled call")
    return ", ".join(parts)


def cost_text(f: dict, per: str, shares: bool) -> str | None:
    """A finding's cost: µs per call, or with `shares` its share of the profiled call (the profiler's host
    overhead inflates every op, but shares hold); None for an informational finding (cost 0.0)."""
    if not f.get("cost_us"):
        return None
    share = f.get("share_of_forward")
    if shares and share is not None:
        return f"{100 * share:.2g}% of the call"
    return us(f.get("cost_us")) + per


def _host_bound(record: dict) -> str:
    """cpu-bound from the timing: against graph replay's device time, or the GPU's busy time and idle
    share where device time was timed back to back."""
    device = record.get("device_us") or {}
    if device.get("method") == "back-to-back" and record.get("gpu_busy_us") is not None:
        return (f"cpu-bound (host {us(record.get('host_us'))} per call, GPU busy {us(record['gpu_busy_us'])}, "
                f"idle {100 * (record.get('gpu_idle_share') or 0):.0f}% back to back)")
    return f"cpu-bound (host {us(record.get('host_us'))} ≥ device {us(device.get('median'))} per call)"


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
