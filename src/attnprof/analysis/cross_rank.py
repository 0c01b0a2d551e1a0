"""What only hundreds of ranks show together, from their summaries (analysis.distributed): each step's
spread across ranks, the slowest and the fastest rank and what differs between them, and the stragglers.
Imports no torch; reads a few floats per rank and step, so a thousand ranks cost milliseconds.

A straggler is the rank the others wait for: it reaches a collective late because its own work before it
ended late. Ranks waiting at the collective reach it early and sit in a long NCCL kernel, so their
communication time is long and their arrival early; only the late arrival names the cause.
"""

from __future__ import annotations

import statistics

PERCENTILES = (0, 10, 50, 90, 100)
STEP_VIEW = {"gpu_us": "busy_us", "exposed_comm_us": "exposed_comm_us", "attention_us": "attention_us"}
COMPARED = ("compute_us", "attention_us", "merge_us", "comm_us", "exposed_comm_us", "busy_us", "span_us",
            "nccl_kernels")
LATE_SHARE = 0.05  # later than the median rank by 5% of the median step span at a collective: late
LATE_MIN_US = 1.0  # ... and by at least this: equal ranks' timestamps differ by rounding


def percentiles(values: list[float]) -> dict[str, float]:
    """p0, p10, p50, p90, p100 of `values` (linear between the closest ranks, as NumPy's default)."""
    ordered = sorted(values)
    out = {}
    for q in PERCENTILES:
        at = (len(ordered) - 1) * q / 100
        lo = int(at)
        hi = min(lo + 1, len(ordered) - 1)
        out[f"p{q}"] = round(ordered[lo] + (ordered[hi] - ordered[lo]) * (at - lo), 3)
    return out


def cross_rank(ranks: list[dict], shift_us: dict[int, float]) -> dict:
    """The view of `ranks` (summaries with instances), their clocks lined up by `shift_us` (rank -> µs); each
    rank's summary gains its median lateness at the step's first collective (`late_us`)."""
    across = {k: percentiles([r[k] for r in ranks]) for k in COMPARED if all(r.get(k) is not None for r in ranks)}
    return {"across_ranks": across, "steps": step_percentiles(ranks), **extremes(ranks),
            "stragglers": stragglers(ranks, shift_us)}


def _steps(r: dict, field: str) -> list:
    return (r.get("steps") or {}).get(field) or []


def step_percentiles(ranks: list[dict]) -> list[dict]:
    """Per step (the i-th instance of every rank): GPU time, exposed communication and attention time
    across ranks, as percentiles."""
    n = min((len(_steps(r, "busy_us")) for r in ranks), default=0)
    return [{"step": i, **{name: percentiles([_steps(r, field)[i] for r in ranks]) for name, field in
                           STEP_VIEW.items()}} for i in range(n)]


def extremes(ranks: list[dict]) -> dict:
    """The rank with the most GPU work (compute: the one the others wait for) and the one with the least,
    with the figures that differ most between them, largest difference first."""
    slowest = max(ranks, key=lambda r: (r["compute_us"], -r["rank"]))
    fastest = min(ranks, key=lambda r: (r["compute_us"], r["rank"]))
    differs = [{"field": k, "slowest": slowest[k], "fastest": fastest[k],
                "difference": round(slowest[k] - fastest[k], 3)}
               for k in COMPARED if None not in (slowest.get(k), fastest.get(k)) and slowest[k] != fastest[k]]
    differs.sort(key=lambda d: -abs(d["difference"]))
    return {"fastest_rank": fastest["rank"], "differs": differs}


def stragglers(ranks: list[dict], shift_us: dict[int, float]) -> list[dict]:
    """The ranks that reach the step's first collective late (on the common clock) in most steps, latest
    first: how late at the median step, and in how many steps. Every rank that reaches one gets `late_us`."""
    arriving = [r for r in ranks if any(x is not None for x in _steps(r, "comm_start_us"))]
    n = min((len(_steps(r, "comm_start_us")) for r in arriving), default=0)
    if len(arriving) < 2 or not n:
        return []
    spans = [s for r in ranks for s in [r.get("span_us")] if s]
    threshold = max(LATE_SHARE * statistics.median(spans), LATE_MIN_US) if spans else LATE_MIN_US
    late: dict[int, list[float]] = {r["rank"]: [] for r in arriving}
    for i in range(n):
        at = {r["rank"]: _steps(r, "comm_start_us")[i] + shift_us[r["rank"]] for r in arriving
              if _steps(r, "comm_start_us")[i] is not None}
        middle = statistics.median(at.values())
        for rank, t in at.items():
            late[rank].append(t - middle)
    for r in arriving:
        r["late_us"] = round(statistics.median(late[r["rank"]]), 3) if late[r["rank"]] else None
    found = [{"rank": rank, "late_us": round(statistics.median(times), 3),
              "steps_late": sum(t > threshold for t in times), "steps": len(times)}
             for rank, times in late.items() if sum(t > threshold for t in times) * 2 > len(times)]
    return sorted(found, key=lambda s: (-s["late_us"], s["rank"]))
