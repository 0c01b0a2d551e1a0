"""Attribute GPU work to the regions that launched it. Imports no torch.

A GPU activity (kernel, memcpy, memset) belongs to the forward whose `record_function`
range holds its *launch* (the `cuda_runtime`/`cuda_driver` event with the same
`args.correlation`), never to the range its own GPU timestamps fall in: GPU work runs
late, so a GPU-time window holds work launched by the step before.
"""

from __future__ import annotations

import re
import statistics
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from operator import attrgetter

from .trace import GPU_CATEGORIES, LAUNCH_CATEGORIES, Event, Trace

PROFILER_STEP = re.compile(r"ProfilerStep#\d+")
STEP_REGION = "ProfilerStep#*"
KIND_OF_CATEGORY = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
COPY_OPS = ("aten::copy_",)  # every real data copy on the host goes through copy_
_EPS = 1e-3  # µs: torch rounds ends to the nanosecond, so a child may end a hair past its parent
_TS = attrgetter("ts")
_NO_THREAD: tuple[list[Event], list[float], list[int]] = ([], [], [])


@dataclass(frozen=True)
class Activity:
    """A GPU activity joined to the host event that launched it."""

    event: Event
    kind: str  # kernel | memcpy | memset
    launch: Event | None


@dataclass(frozen=True)
class Forward:
    region: Event
    activities: list[Activity]
    cpu_ops: list[Event]  # every cpu_op inside the region, nested ones included

    @property
    def gpu_time_us(self) -> float:
        return sum(a.event.dur for a in self.activities)

    def count(self, kind: str) -> int:
        return sum(1 for a in self.activities if a.kind == kind)


@dataclass(frozen=True)
class Analysis:
    trace: Trace
    region: str
    forwards: list[Forward]
    has_gpu: bool
    orphans: int  # GPU activities whose correlation matches no launch
    outside: int  # GPU activities launched outside every region
    warnings: tuple[str, ...] = ()
    index: OpIndex = field(repr=False, default=None)  # type: ignore[assignment]

    @property
    def source(self) -> str:
        return self.trace.source


def analyze_trace(trace: Trace, region: str | None = None) -> Analysis:
    """Split `trace` into forwards of `region` (default: the most frequent annotation)."""
    events = trace.events
    annotations = [e for e in events if e.cat == "user_annotation"]
    region = region or default_region(annotations)
    regions = sorted(_region_events(annotations, region), key=_TS)
    launches = _launches(events)
    gpu = [e for e in events if e.cat in GPU_CATEGORIES]
    has_gpu = bool(gpu) or bool(launches)
    warnings = list(trace.warnings)
    if not regions:
        warnings.append(f"no '{region}' region in the trace; nothing attributed")
    per_region, orphans, outside = _attribute(gpu, launches, _RegionLocator(regions))
    if orphans:
        warnings.append(f"{orphans} GPU activities match no launch event (kept as unattributed)")
    ops = sorted([e for e in events if e.cat == "cpu_op"], key=_TS)
    starts = [e.ts for e in ops]
    forwards = [Forward(r, per_region[i], _within(ops, starts, r)) for i, r in enumerate(regions)]
    return Analysis(trace, region, forwards, has_gpu, orphans, outside, tuple(warnings), OpIndex(ops))


def default_region(annotations: list[Event]) -> str:
    names = Counter(e.name for e in annotations if not PROFILER_STEP.fullmatch(e.name))
    if names:
        return names.most_common(1)[0][0]  # ties: the first seen, since Counter keeps order
    return STEP_REGION


def _region_events(annotations: list[Event], region: str) -> list[Event]:
    if region == STEP_REGION:
        return [e for e in annotations if PROFILER_STEP.fullmatch(e.name)]
    return [e for e in annotations if e.name == region]


def _launches(events: list[Event]) -> dict[int, Event]:
    """Launch events by correlation id (the last one wins if a broken trace repeats an id)."""
    found = [e for e in events if e.cat in LAUNCH_CATEGORIES and e.args is not None]
    return {e.args.correlation: e for e in found if e.args.correlation is not None}


def _attribute(
    gpu: list[Event], launches: dict[int, Event], locate: _RegionLocator
) -> tuple[dict[int, list[Activity]], int, int]:
    """GPU activities per region index, by where their launch ran; plus orphans and outsiders."""
    per_region: dict[int, list[Activity]] = defaultdict(list)
    orphans = outside = 0
    for event in gpu:
        launch = launches.get(event.args.correlation) if event.args is not None else None
        if launch is None:
            orphans += 1
            continue
        slot = locate(launch)
        if slot is None:
            outside += 1
        else:
            per_region[slot].append(Activity(event, KIND_OF_CATEGORY[event.cat], launch))
    return per_region, orphans, outside


def _open_parents(spans: list[Event]) -> list[int]:
    """For spans sorted by start: the index of the latest earlier span still open at each start.

    Following these links from the last span to start at or before t visits every span that
    holds t (plus a few that do not), latest start first, whatever the nesting: a span is
    only dropped from the stack once it has ended, and then it cannot hold a later t.
    """
    parents, stack = [], []
    ends = [s.ts + s.dur + _EPS for s in spans]
    for i, s in enumerate(spans):
        start = s.ts
        while stack and ends[stack[-1]] < start:
            stack.pop()
        parents.append(stack[-1] if stack else -1)
        stack.append(i)
    return parents


class _RegionLocator:
    """Finds the region (same process) whose host time range holds an event's start."""

    def __init__(self, regions: list[Event]):
        self._index: dict[int | str, tuple[list[int], list[float], list[int]]] = {}
        by_pid: dict[int | str, list[int]] = defaultdict(list)
        for i, r in enumerate(regions):  # already sorted by start
            by_pid[r.pid].append(i)
        for pid, idx in by_pid.items():
            spans = [regions[i] for i in idx]
            self._index[pid] = (idx, [r.ts for r in spans], _open_parents(spans))
        self._regions = regions

    def __call__(self, event: Event) -> int | None:
        found = self._index.get(event.pid)
        if found is None:
            return None
        idx, starts, parents = found
        j = bisect_right(starts, event.ts) - 1
        while j >= 0:  # the latest-starting region that holds the event: the innermost
            r = self._regions[idx[j]]
            if event.ts <= r.ts + r.dur:
                return idx[j]
            j = parents[j]
        return None


def _within(ops: list[Event], starts: list[float], region: Event) -> list[Event]:
    lo = bisect_left(starts, region.ts)
    hi = bisect_right(starts, region.ts + region.dur)
    limit, pid = region.ts + region.dur + _EPS, region.pid
    return [e for e in ops[lo:hi] if e.pid == pid and e.ts + e.dur <= limit]


class OpIndex:
    """Host-op nesting per thread: which cpu_ops enclose a given host event.

    Built on first use, so an analysis that never asks pays nothing. Each lookup follows the
    nesting links of `_open_parents`: it costs the nesting depth, not the number of ops.
    """

    def __init__(self, ops: list[Event]):
        self._ops = ops
        self._threads: dict[tuple, tuple[list[Event], list[float], list[int]]] | None = None

    def _thread(self, key: tuple) -> tuple[list[Event], list[float], list[int]]:
        if self._threads is None:
            grouped: dict[tuple, list[Event]] = defaultdict(list)
            for op in self._ops:
                grouped[(op.pid, op.tid)].append(op)
            self._threads = {k: _nesting(v) for k, v in grouped.items()}
        return self._threads.get(key, _NO_THREAD)

    def chain(self, event: Event) -> list[Event]:
        """The cpu_ops that enclose `event` on its thread, outermost first."""
        ops, starts, parents = self._thread((event.pid, event.tid))
        j = bisect_right(starts, event.ts) - 1
        end = event.ts + event.dur
        enclosing = []
        while j >= 0:
            op = ops[j]
            if end <= op.ts + op.dur + _EPS and op is not event:
                enclosing.append(op)
            j = parents[j]
        enclosing.reverse()  # the links run innermost (latest start) first
        return enclosing


def _outer_first(e: Event) -> tuple[float, float]:
    return (e.ts, -e.dur)  # equal starts: the enclosing op first


def _nesting(ops: list[Event]) -> tuple[list[Event], list[float], list[int]]:
    ops = sorted(ops, key=_outer_first)
    return ops, [e.ts for e in ops], _open_parents(ops)


def median_int(values: list[int]) -> int:
    return int(statistics.median_low(values)) if values else 0


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def per_forward(a: Analysis) -> dict:
    """The per-forward facts of the `attnprof.analysis/1` contract (medians over forwards)."""
    f = a.forwards
    aten = [len([op for op in x.cpu_ops if op.name.startswith("aten::")]) for x in f]
    copies = [len([op for op in x.cpu_ops if op.name in COPY_OPS]) for x in f]
    facts = {"aten_ops": median_int(aten), "copies": median_int(copies)}
    facts["cpu_time_us"] = round(median([x.region.dur for x in f]), 3) if f else None
    if not a.has_gpu:
        return {"gpu_ops": None, "kernels": None, "memcpy": None, "memset": None,
                "gpu_time_us": None, **facts}
    return {
        "gpu_ops": median_int([len(x.activities) for x in f]),
        "kernels": median_int([x.count("kernel") for x in f]),
        "memcpy": median_int([x.count("memcpy") for x in f]),
        "memset": median_int([x.count("memset") for x in f]),
        "gpu_time_us": round(median([x.gpu_time_us for x in f]), 3),
        **facts,
    }


def kernel_table(a: Analysis) -> list[dict]:
    """Each distinct GPU activity launched inside the regions, by total time."""
    total: dict[tuple[str, str], list[float]] = defaultdict(list)
    for fwd in a.forwards:
        for act in fwd.activities:
            total[(act.event.name, act.kind)].append(act.event.dur)
    n = max(len(a.forwards), 1)
    rows = [
        {"name": name, "kind": kind, "per_forward": round(len(d) / n, 3),
         "avg_us": round(sum(d) / len(d), 3), "total_us": round(sum(d), 3)}
        for (name, kind), d in total.items()
    ]
    return sorted(rows, key=lambda r: -r["total_us"])
