"""Where each GPU stream's time went: busy in compute, communication and memory copies, or idle, and why it
was idle; how long launched work waited to start. Imports no torch.

The definitions are HTA's (HolisticTraceAnalysis, hta/analyzers/breakdown_analysis.py), so the figures can be
set side by side with its own:
- Kinds by name: `^nccl.*Kernel` communication, `^Memcpy|^Memset|^dma` memory, every other GPU activity
  computation (`get_kernel_type`).
- Over the whole trace, per GPU (HTA's temporal breakdown, per rank): the span from the first activity's start
  to the last one's end; idle is the span less the union of all its activities; compute the union of its
  computation kernels; the rest of the span ("non-compute") is communication and memory alone.
- Per stream (HTA's idle-time breakdown): each gap between an activity and the one before it on its stream is
  host wait when the activity's launch started after the previous one ended (the GPU ran out of work the host
  had sent), kernel wait when the gap is under 30 µs (HTA's `consecutive_kernel_delay` default, 30, which its
  docstring calls ns but HTA 0.5 compares with its frames' microseconds: back-to-back launches), other
  (waiting on another stream's work, an event) otherwise; of "other", the part during which another stream of
  the same GPU ran is given apart (`other_while_other_streams_run_us`: the wait HTA's categories leave
  unnamed). HTA sums raw gaps; here a negative gap (two activities of one stream overlapping, which Kineto's
  float timestamps can show) counts as none.
- Queue length per stream (HTA's queue-length summary): one more at each launch, one less as each launched
  activity starts; its largest, median and mean over those moments (HTA's `describe()` of the series).
- Launch to start, per region instance (the step): an activity's start less its launch's start.
HTA rounds float microsecond timestamps to whole microseconds (start up, end down) unless
HTA_DISABLE_NS_ROUNDING=1, and by default keeps only the activities launched before the last ProfilerStep
starts (`launched_before`); with both, the definitions above give HTA's figures (tests/analysis/test_timeline.py).
"""

from __future__ import annotations

import re
import statistics

import numpy as np

from attnprof.analysis import join
from attnprof.analysis.activities import first_seen_groups
from attnprof.analysis.attribution import Analysis
from attnprof.analysis.comm import union_bounds, union_length
from attnprof.analysis.name_tests import name_tests
from attnprof.analysis.queries import per
from attnprof.analysis.regions import rows_of
from attnprof.analysis.streams import arg_labels
from attnprof.trace.events import GPU_CATEGORIES, LAUNCH_CATEGORIES

KINDS = ("compute", "communication", "memory")
KERNEL_WAIT_US = 30.0  # HTA's consecutive_kernel_delay default, in the unit its frames hold (µs)
_COMMUNICATION = re.compile(r"^nccl.*Kernel")
_MEMORY = re.compile(r"^(Memcpy|Memset|dma)")


def _is_communication(name: str) -> bool:
    return _COMMUNICATION.match(name) is not None


def _is_memory(name: str) -> bool:
    return _MEMORY.match(name) is not None


def breakdown(a: Analysis) -> dict | None:
    """Per GPU and per stream, the time-line breakdown; per region instance, the launch-to-start delays. None
    for a trace without GPU activities. Once per analysis."""
    return per(a, "timeline", a, _breakdown)


def _breakdown(a: Analysis) -> dict | None:
    cols = a.trace.columns
    rows = rows_of(cols, *GPU_CATEGORIES)
    if not len(rows):
        return None
    launched = join.launches_of(cols, rows_of(cols, *LAUNCH_CATEGORIES), rows)
    return {"basis": "whole trace; HTA's kinds and idle rules (analysis/timeline.py)",
            "devices": devices(a, rows, launched), "launch_delay": _launch_delays(a, cols, launched, cols.ts[rows])}


def launched_before(a: Analysis, start: float) -> list[dict]:
    """`breakdown`'s devices of only the GPU activities launched before `start` (HTA's window: before the last
    ProfilerStep starts, the step it leaves out as cut short)."""
    cols = a.trace.columns
    rows = rows_of(cols, *GPU_CATEGORIES)
    launched = join.launches_of(cols, rows_of(cols, *LAUNCH_CATEGORIES), rows)
    keep = launched >= 0
    keep[keep] = cols.ts[launched[keep]] < start
    return devices(a, rows[keep], launched[keep])


def devices(a: Analysis, rows: np.ndarray, launched: np.ndarray) -> list[dict]:
    """Per GPU (its args' device, else its pid), its breakdown and its streams' (args' stream, else tid), of the
    GPU activities at `rows` launched by the rows `launched` (-1: none)."""
    cols = a.trace.columns
    launch_ts = np.where(launched >= 0, cols.ts[np.maximum(launched, 0)], np.nan)
    kind = np.zeros(len(rows), np.int8)  # codes into KINDS
    kind[name_tests(a, _is_communication)[cols.name[rows]]] = 1
    kind[name_tests(a, _is_memory)[cols.name[rows]]] = 2
    device, device_names = arg_labels(cols, rows, "device", cols.pid, cols.pids)
    stream, stream_names = arg_labels(cols, rows, "stream", cols.thread, [t[1] for t in cols.threads])
    ts, end = cols.ts[rows], cols.ts[rows] + cols.dur[rows]
    found = []
    for dev in first_seen_groups(device):
        groups = [dev[g] for g in first_seen_groups(stream[dev])]
        streams = [_stream(stream_names[int(stream[at[0]])], at, ts, end, kind, launch_ts,
                           union_bounds(ts[rest], end[rest]))
                   for at in groups for rest in [np.setdiff1d(dev, at, assume_unique=True)]]
        found.append({"device": device_names[int(device[dev[0]])], **_spans(dev, ts, end, kind), "streams": streams})
    return found


def _spans(at: np.ndarray, ts: np.ndarray, end: np.ndarray, kind: np.ndarray) -> dict:
    """Span, busy time by kind (each the union of its activities) and idle time of the activities `at`."""
    span = float(end[at].max() - ts[at].min())
    busy = union_length(ts[at], end[at])
    out = {"activities": len(at), "span_us": round(span, 3), "busy_us": round(busy, 3)}
    for code, name in enumerate(KINDS):
        mine = at[kind[at] == code]
        out[f"{name}_us"] = round(union_length(ts[mine], end[mine]), 3)
    out["idle_us"] = round(span - busy, 3)
    out["idle_share"] = round((span - busy) / span, 4) if span > 0 else None
    return out


def _stream(stream, at: np.ndarray, ts: np.ndarray, end: np.ndarray, kind: np.ndarray, launch_ts: np.ndarray,
            others: tuple[np.ndarray, np.ndarray]) -> dict:
    """One stream's breakdown, its idle time by cause (HTA's rules, in module doc); `others`: the union of the
    other streams' activities on its GPU (union_bounds)."""
    at = at[np.argsort(ts[at], kind="stable")]
    gap = np.maximum(ts[at][1:] - end[at][:-1], 0.0)
    host = launch_ts[at][1:] > end[at][:-1]  # NaN (no launch) compares False, as HTA's join leaves it
    kernel = ~host & (gap < KERNEL_WAIT_US)
    other = ~host & ~kernel
    causes = {"host_wait_us": gap[host], "kernel_wait_us": gap[kernel], "other_us": gap[other]}
    idle = {k: round(sum(v.tolist(), 0.0), 3) for k, v in causes.items()}
    beside = _covered(others, end[at][:-1][other], ts[at][1:][other])
    return {"stream": stream, **_spans(at, ts, end, kind), "idle_by_cause": idle,
            "other_while_other_streams_run_us": round(beside, 3), "queue_length": _queue(launch_ts[at], ts[at])}


def _covered(bounds: tuple[np.ndarray, np.ndarray], starts: np.ndarray, ends: np.ndarray) -> float:
    """How much of the spans starts[k]..ends[k] (disjoint) the sorted disjoint intervals `bounds` cover: through
    the covered length up to each time (one search per span end, no walk)."""
    lo, hi = bounds
    if not len(lo) or not len(starts):
        return 0.0
    before = np.concatenate(([0.0], np.cumsum(hi - lo)))  # covered length up to each interval's start

    def upto(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(lo, t, side="right")  # intervals starting at or before t
        last = np.maximum(k - 1, 0)
        partial = np.where(k > 0, np.minimum(t, hi[last]) - lo[last], 0.0)
        return before[np.maximum(k - 1, 0)] * (k > 0) + partial

    return float((upto(ends) - upto(starts)).sum())


def _queue(launch: np.ndarray, start: np.ndarray) -> dict | None:
    """The stream's queue length (launched, not yet started) at each launch and start, summed up; None when no
    activity of it has a launch. Launches first where times tie, as HTA lays its frames."""
    known = ~np.isnan(launch)
    n = int(np.count_nonzero(known))
    if not n:
        return None
    times = np.concatenate((launch[known], start[known]))
    queue = np.cumsum(np.repeat([1, -1], n)[np.argsort(times, kind="stable")])
    return {"max": int(queue.max()), "median": _median(queue), "mean": round(float(queue.mean()), 3)}


def _median(values: np.ndarray) -> float:
    """The median (two middle values averaged), as np.median gives it, without its first call's import of
    numpy.ma (0.15 s)."""
    ordered = np.sort(values)
    half = len(ordered) // 2
    return float(ordered[half]) if len(ordered) % 2 else float((ordered[half - 1] + ordered[half]) / 2)


def _launch_delays(a: Analysis, cols, launched: np.ndarray, ts: np.ndarray) -> dict | None:
    """Per region instance: median and largest launch-to-start delay of the activities it launched; and the
    median of each over the instances."""
    known = np.flatnonzero(launched >= 0)
    if not len(known) or not a.forwards:
        return None
    region = join.regions_of([f.region for f in a.forwards], cols, launched[known])
    delay = ts[known] - cols.ts[launched[known]]
    steps = []
    for i in range(len(a.forwards)):
        mine = delay[region == i]
        if len(mine):
            steps.append({"activities": len(mine), "median_us": round(_median(mine), 3),
                          "max_us": round(float(mine.max()), 3)})
    if not steps:
        return None
    return {"per_instance": steps,
            "median_us": round(statistics.median(s["median_us"] for s in steps), 3),
            "max_us": round(statistics.median(s["max_us"] for s in steps), 3)}
