"""Compare two analyses: the GPU work one forward gained or lost, the findings that came or went.

Works on dicts with `per_forward`, `kernels` and `findings` keys: the `attnprof.analysis/1`
contract, or one variant's record of a run's results (`pipeline.diff` takes `Analysis` objects too,
and builds those dicts with the one builder, `pipeline.one_trace.analysis_dict`). Imports no torch.

GPU activities are matched by `kernel_names.normalize`d name and kind, so the same kernel
matches across runs even when template noise differs (vector widths, lambda indices, Triton's
kernel index); `Memcpy DtoD (Device -> Device)` matches itself. Per-forward counts are
compared: an activity whose count drops is listed as removed with the difference, one whose
count rises as added.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from attnprof.analysis.noise import compare, said
from attnprof.contracts import DiffResult
from attnprof.gpu.kernel_names import normalize, short_name
from attnprof.units import count, us

EPS = 1e-6  # per-forward counts are averages with 3 decimals


def diff(a: dict, b: dict) -> dict:
    """What changed from `a` to `b`, per forward."""
    da, db = _facts(a), _facts(b)
    pa, pb = da.get("per_forward") or {}, db.get("per_forward") or {}
    ga, gb = _activities(da), _activities(db)
    removed, added = _changes(ga, gb, lost=True), _changes(gb, ga, lost=False)
    fa, fb = _finding_ids(da), _finding_ids(db)
    spreads = [x.get("forward_spread") or {} for x in (da, db)]  # the profiled forwards' times, with spreads
    profiled = {key: found for key in PROFILED if (found := compare(spreads[0].get(key), spreads[1].get(key)))}
    timed = compare(da.get("device_us"), db.get("device_us"))  # two run records: measured, with spreads
    result = DiffResult(
        sources={"a": da.get("source"), "b": db.get("source")}, a=pa, b=pb, delta=_delta(pa, pb),
        gpu_time_us=_minus(pb.get("gpu_time_us"), pa.get("gpu_time_us")),
        cpu_time_us=_minus(pb.get("cpu_time_us"), pa.get("cpu_time_us")), removed=removed, added=added,
        findings_removed=[f for f in fa if f not in fb], findings_added=[f for f in fb if f not in fa],
        backend={"a": da.get("backend"), "b": db.get("backend")} if "backend" in da or "backend" in db else None,
        profiled_change=profiled,
        device_time={**timed, "method": da["device_us"].get("method"), "a": da["device_us"]["median"],
                     "b": db["device_us"]["median"]} if timed else None)
    result.summary = _summary(result.to_payload())
    return result.to_payload()


def _facts(x: dict) -> dict:
    if isinstance(x, dict):
        return x
    raise TypeError(f"diff takes two analysis dicts (pipeline.one_trace.analysis_dict), not {type(x).__name__}")


def _activities(d: dict) -> dict[tuple[str, str], dict]:
    """Kernel-table rows grouped by (normalised name, kind): count and time per forward, a display name."""
    groups: dict[tuple[str, str], dict] = {}
    for row in d.get("kernels") or []:
        n, avg = float(row.get("per_forward") or 0.0), float(row.get("avg_us") or 0.0)
        g = groups.setdefault((normalize(row["name"]), row.get("kind", "kernel")),
                              {"per_forward": 0.0, "time_us": 0.0, "names": Counter()})
        g["per_forward"] += n
        g["time_us"] += n * avg
        g["names"][row["name"]] += n
    return groups


def _changes(mine: dict, theirs: dict, lost: bool) -> list[dict]:
    """Activities of `mine` whose per-forward count is higher than in `theirs`, by the difference;
    `lost`: mine is A (the rows are what B removed), else mine is B (what B added)."""
    rows = []
    for key, g in mine.items():
        other = theirs.get(key, {}).get("per_forward", 0.0)
        extra = g["per_forward"] - other
        if extra > EPS:
            avg = g["time_us"] / g["per_forward"]
            a_n, b_n = (g["per_forward"], other) if lost else (other, g["per_forward"])
            name = g["names"].most_common(1)[0][0]
            rows.append({"name": name, "kind": key[1], "per_forward": round(extra, 3),
                         "a_per_forward": round(a_n, 3), "b_per_forward": round(b_n, 3),
                         "time_us_per_forward": round(extra * avg, 3), "normalized": key[0]})
    return sorted(rows, key=lambda r: (-r["time_us_per_forward"], r["name"]))


def _finding_ids(d: dict) -> list[str]:
    return list(dict.fromkeys(f["id"] for f in d.get("findings") or [] if isinstance(f, dict) and "id" in f))


def _minus(b: Any, a: Any) -> float | None:
    ok = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
    return round(b - a, 3) if ok else None


def _delta(pa: dict, pb: dict) -> dict:
    return {k: _minus(pb.get(k), pa.get(k)) for k in dict.fromkeys([*pa, *pb])}


PROFILED = {"gpu_time_us": "GPU time in the traces",
            "cpu_time_us": "host time in the traces (profiler overhead included)"}


def _profiled_verdict(change: dict | None) -> str:
    """The noise verdict on a profiled time (the median of a few profiled forwards, the profiler's overhead
    included): said, and marked as no measure of speed-up."""
    return "" if change is None else f": {said(change)}; profiled, not a speed-up measure"


def _summary(d: dict) -> list[str]:
    """One line per change, for reports: measured device time first (no change inside both spreads),
    then exact counts, the activities removed/added, the profiled times (labelled so), findings."""
    lines = []
    if t := d.get("device_time"):
        lines.append(f"device time per forward ({t['method']}) {us(t['a'])} -> {us(t['b'])}: {said(t)}")
    for key, label in (("gpu_ops", "GPU activities"), ("kernels", "kernels"), ("memcpy", "memcpy"),
                       ("aten_ops", "aten ops"), ("copies", "copies")):
        if d["delta"].get(key):
            lines.append(f"{label} per forward {d['a'][key]} -> {d['b'][key]} ({d['delta'][key]:+g})")
    lines += [f"{verb} {short_name(r['name'])} ({r['kind']}, {count(r['per_forward'])} per forward)"
              for verb, rows in (("removed", d["removed"]), ("added", d["added"])) for r in rows[:5]]
    for key, label in PROFILED.items():
        if d[key] is not None:
            sign = "+" if d[key] >= 0 else ""
            lines.append(f"{label}, per forward {us(d['a'].get(key))} -> {us(d['b'].get(key))} ({sign}{us(d[key])})"
                         + _profiled_verdict(d.get("profiled_change", {}).get(key)))
    lines += [f"finding gone: {f}" for f in d["findings_removed"]]
    lines += [f"finding new: {f}" for f in d["findings_added"]]
    return lines
