"""Run B against run A, per (problem, variant): same | faster | slower | regressed | improved.

Counts per forward (GPU activities, kernels, memcpy, memset, aten ops, copies) come from the
profiler's launch records, not from a clock, so they have no noise: any change is real, and any
increase is `regressed` (a decrease with none increasing is `improved`).

A time (device time per forward: median with p25 and p75) moves only when the move is larger than
the noise of both runs and than the threshold: B is `slower` when B's middle half lies wholly
above A's (B's p25 > A's p75) and B's median exceeds A's by more than the threshold (5% by
default); `faster` mirrors that. One slow run can still be a busy machine, so a time alone makes
`regressed` only with persistence: B is also slower, by the same test, than the run before A of
the same problem on the same kind of device. A slower time with any count change is `regressed`
too, since the code that ran changed. Without persistence it stays `slower`, which does not fail
the gate. `improved` by time mirrors this (faster than both, or faster with a count change).
A variant that ran in A and failed in B is `regressed`; failed in A and ran in B, `improved`.
"""

from __future__ import annotations

from attnprof.analysis import noise
from attnprof.contracts import CompareResult
from attnprof.history.store import COUNTS, HistoryError, setting_changes
from attnprof.units import count

DEFAULT_THRESHOLD = 0.05
VERDICTS = ("same", "faster", "slower", "regressed", "improved")
RUN_KEYS = ("kind", "problem", "device_kind")  # compared along with the environment


def compare(a: dict | None, b: dict, before_a: dict | None = None, threshold: float = DEFAULT_THRESHOLD) -> dict:
    """The `attnprof.compare/1` dict of two history runs (store.read_runs' shape); `before_a` is
    the run before A that a time change must also beat to be `regressed` or `improved`. Without A
    (B is the first run of its problem on its device) nothing is compared and nothing regressed,
    so a CI gate passes on its first run."""
    if a and (changed := setting_changes(a, b)):
        said = ", ".join(f"{k} {v['a']} -> {v['b']}" for k, v in changed.items())
        raise HistoryError(f"runs {a['id']} and {b['id']} were timed with different settings ({said}): their "
                           "times answer different questions; compare runs timed alike (`attnprof history` "
                           "shows each run's settings)")
    rows_a, rows_b = _by_key(a) if a else {}, _by_key(b)
    earlier = _by_key(before_a) if before_a else {}
    variants = [_variant(key, rows_a[key], rows_b[key], earlier.get(key), threshold)
                for key in rows_b if key in rows_a]
    return CompareResult(a=a["id"] if a else None, b=b["id"], before_a=before_a["id"] if before_a else None,
                         threshold=threshold, environment_changes=environment_changes(a, b) if a else {},
                         variants=variants, only_in_a=[_label(k) for k in rows_a if k not in rows_b],
                         only_in_b=[_label(k) for k in rows_b if k not in rows_a],
                         regressed=any(v["verdict"] == "regressed" for v in variants)).to_payload()


def environment_changes(a: dict, b: dict) -> dict:
    """{field: {"a": value, "b": value}} for each environment field (and run kind, problem and device
    kind) that differs; a field only one run reports shows None on the other side."""
    sides = [{**r["environment"], **{k: r.get(k) for k in RUN_KEYS}} for r in (a, b)]
    return {k: {"a": sides[0].get(k), "b": sides[1].get(k)}
            for k in sorted(sides[0].keys() | sides[1].keys()) if sides[0].get(k) != sides[1].get(k)}


def count_changes(a: dict, b: dict) -> dict:
    """{count: {"a", "b"}} for each count both rows know and that differs."""
    return {c: {"a": a[c], "b": b[c]} for c in COUNTS
            if a.get(c) is not None and b.get(c) is not None and a[c] != b[c]}


def time_change(a: dict, b: dict, threshold: float) -> int:
    """+1 when B's device time is slower than A's beyond both spreads and the threshold, -1 when
    faster, 0 otherwise (or when either has no device time): the one verdict, noise.compare."""
    change = noise.compare(a.get("device_us"), b.get("device_us"), threshold)
    return {"slower": 1, "faster": -1}.get(change["verdict"], 0) if change else 0


def _variant(key: tuple[str, str], a: dict, b: dict, before_a: dict | None, threshold: float) -> dict:
    verdict, why = verdict_of(a, b, before_a, threshold)
    return {"name": key[1], "problem": key[0], "verdict": verdict, "why": why, "a": _side(a), "b": _side(b),
            "delta": _delta(a, b)}


def verdict_of(a: dict, b: dict, before_a: dict | None, threshold: float) -> tuple[str, str]:
    """One variant's verdict and the reason for it, in words."""
    if (a["status"] == "ok") != (b["status"] == "ok"):
        return ("regressed", f"ran in A, {b['status']} in B") if a["status"] == "ok" else \
               ("improved", f"{a['status']} in A, ran in B")
    if a["status"] != "ok":
        return "same", f"{b['status']} in both"
    counts = count_changes(a, b)
    up = [c for c, d in counts.items() if d["b"] > d["a"]]
    if up:
        return "regressed", "more " + ", ".join(f"{c} ({count(counts[c]['a'])} -> {count(counts[c]['b'])})" for c in up)
    moved = time_change(a, b, threshold)
    if moved:
        return _timed(moved, counts, before_a is not None and time_change(before_a, b, threshold) == moved)
    if counts:
        return "improved", "fewer " + ", ".join(f"{c} ({count(d['a'])} -> {count(d['b'])})" for c, d in counts.items())
    return "same", "no count changed; time within the noise"


def _timed(moved: int, counts: dict, persists: bool) -> tuple[str, str]:
    word = "slower" if moved > 0 else "faster"
    if counts:
        return ("regressed" if moved > 0 else "improved"), f"{word}, with fewer {', '.join(counts)}"
    if persists:
        return ("regressed" if moved > 0 else "improved"), f"{word} than A and than the run before A"
    return word, f"{word} than A only (not yet persistent)"


def _side(row: dict) -> dict:
    return {k: row.get(k) for k in ("status", "reason", "device_us", *COUNTS, "findings")}


def _delta(a: dict, b: dict) -> dict:
    delta = {c: b[c] - a[c] for c in COUNTS if a.get(c) is not None and b.get(c) is not None}
    ta, tb = (r.get("device_us") or {} for r in (a, b))
    if ta.get("median") and tb.get("median") is not None:
        delta["device_us"] = round(tb["median"] - ta["median"], 3)
        delta["device_pct"] = round(100 * (tb["median"] / ta["median"] - 1), 2)
    delta["findings_new"] = sorted(set(b.get("findings") or []) - set(a.get("findings") or []))
    delta["findings_gone"] = sorted(set(a.get("findings") or []) - set(b.get("findings") or []))
    return delta


def _by_key(run: dict) -> dict[tuple[str, str], dict]:
    return {(row["problem"], row["name"]): row for row in run["variants"]}


def _label(key: tuple[str, str]) -> str:
    return f"{key[1]} @ {key[0]}"
