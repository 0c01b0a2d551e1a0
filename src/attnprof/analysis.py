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

from .trace import GPU_CATEGORIES, LAUNCH_CATEGORIES, Event, Trace

PROFILER_STEP = re.compile(r"ProfilerStep#\d+")
STEP_REGION = "ProfilerStep#*"
KIND_OF_CATEGORY = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
COPY_OPS = ("aten::copy_",)  # every real data copy on the host goes through copy_


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
    annotations = [e for e in trace.events if e.cat == "user_annotation"]
    region = region or default_region(annotations)
    regions = sorted(_region_events(annotations, region), key=lambda e: e.ts)
    launches = {e.correlation: e for e in trace.events if e.cat in LAUNCH_CATEGORIES and e.correlation is not None}
    gpu = [e for e in trace.events if e.cat in GPU_CATEGORIES]
    has_gpu = bool(gpu) or bool(launches)
    warnings = list(trace.warnings)
    if not regions:
        warnings.append(f"no '{region}' region in the trace; nothing attributed")

    per_region: dict[int, list[Activity]] = defaultdict(list)
    orphans = outside = 0
    locate = _RegionLocator(regions)
    for event in gpu:
        launch = launches.get(event.correlation)
        if launch is None:
            orphans += 1
            continue
        slot = locate(launch)
        if slot is None:
            outside += 1
        else:
            per_region[slot].append(Activity(event, KIND_OF_CATEGORY[event.cat], launch))
    if orphans:
        warnings.append(f"{orphans} GPU activities match no launch event (kept as unattributed)")

    ops = sorted((e for e in trace.events if e.cat == "cpu_op"), key=lambda e: e.ts)
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


class _RegionLocator:
    """Finds the region (same process) whose host time range holds an event's start."""

    def __init__(self, regions: list[Event]):
        self._regions = regions
        self._starts = [r.ts for r in regions]

    def __call__(self, event: Event) -> int | None:
        i = bisect_right(self._starts, event.ts) - 1
        while i >= 0:  # regions may nest or overlap in other processes: walk back a little
            r = self._regions[i]
            if r.pid == event.pid and r.ts <= event.ts <= r.end:
                return i
            if event.ts - r.ts > 1e7:  # 10 s: no forward is that long, stop looking
                return None
            i -= 1
        return None


def _within(ops: list[Event], starts: list[float], region: Event) -> list[Event]:
    lo = bisect_left(starts, region.ts)
    hi = bisect_right(starts, region.end)
    return [e for e in ops[lo:hi] if e.pid == region.pid and e.end <= region.end + 1e-3]


class OpIndex:
    """Host-op nesting per thread: which cpu_ops enclose a given host event."""

    def __init__(self, ops: list[Event]):
        self._by_thread: dict[tuple, list[Event]] = defaultdict(list)
        for op in ops:
            self._by_thread[(op.pid, op.tid)].append(op)
        self._starts = {k: [e.ts for e in v] for k, v in self._by_thread.items()}

    def chain(self, event: Event) -> list[Event]:
        """The cpu_ops that enclose `event` on its thread, outermost first."""
        key = (event.pid, event.tid)
        ops = self._by_thread.get(key, [])
        i = bisect_right(self._starts.get(key, []), event.ts)
        enclosing = []
        for op in reversed(ops[max(0, i - 512):i]):  # nesting is shallow: a bounded look-back
            if op.ts <= event.ts and event.end <= op.end + 1e-3 and op is not event:
                enclosing.append(op)
        return sorted(enclosing, key=lambda e: (e.ts, -e.dur))


def median_int(values: list[int]) -> int:
    return int(statistics.median_low(values)) if values else 0


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def per_forward(a: Analysis) -> dict:
    """The per-forward facts of the `attnprof.analysis/1` contract (medians over forwards)."""
    f = a.forwards
    aten = [sum(1 for op in x.cpu_ops if op.name.startswith("aten::")) for x in f]
    copies = [sum(1 for op in x.cpu_ops if op.name in COPY_OPS) for x in f]
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
