"""Attribute GPU work to the regions that launched it. Imports no torch.

A GPU activity (kernel, memcpy, memset) belongs to the forward whose `record_function`
range holds its *launch* (the `cuda_runtime`/`cuda_driver` event with the same
`args.correlation`), never to the range its own GPU timestamps fall in: GPU work runs
late, so a GPU-time window holds work launched by the step before.
"""

from __future__ import annotations

import math
import re
import statistics
from bisect import bisect_right
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter

import msgspec
import numpy as np

from attnprof.analysis.columns import spans_at, thread_codes
from attnprof.analysis.nesting import EPS as _EPS
from attnprof.analysis.nesting import OpIndex, open_parents
from attnprof.errors import UserError
from attnprof.trace.columns import Columns
from attnprof.trace.reader import GPU_CATEGORIES, LAUNCH_CATEGORIES, Event, Trace

PROFILER_STEP = re.compile(r"ProfilerStep#\d+")
STEP_REGION = "ProfilerStep#*"
# c10d wraps each collective in an annotation named after it (`nccl:all_to_all`): communication, not a region
COLLECTIVE = re.compile(r"(nccl|gloo|mpi|ucc|xccl):")
# torch annotates each DataLoader batch and optimizer call itself: a training loop's, not the user's regions
TORCH_ANNOTATION = re.compile(r"(enumerate\(DataLoader\)|Optimizer\.\w+)#")
WHOLE_TRACE = "(whole trace)"  # the region of a trace with neither annotations nor profiler steps
KIND_OF_CATEGORY = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
COPY_OPS = ("aten::copy_",)  # every real data copy on the host goes through copy_
_TS = attrgetter("ts")
REGIONS_SHOWN = 8  # region names an error lists


class Activity(msgspec.Struct, frozen=True, gc=False):
    """A GPU activity joined to the host event that launched it (a struct: a trace has thousands)."""

    event: Event
    kind: str  # kernel | memcpy | memset
    launch: Event | None


@dataclass(frozen=True)
class Forward:
    region: Event
    activities: list[Activity]
    cpu_ops: list[Event]  # every cpu_op inside the region, nested ones included
    # where the cpu_ops are in the trace's columns (None for a forward made from some of another's ops)
    rows: np.ndarray | None = field(default=None, repr=False, compare=False)
    columns: Columns | None = field(default=None, repr=False, compare=False)  # the trace's, with `rows`
    launch_rows: np.ndarray | None = field(default=None, repr=False, compare=False)  # per activity, with `rows`

    @cached_property
    def gpu_time_us(self) -> float:
        return sum([a.event.dur for a in self.activities])

    def count(self, kind: str) -> int:
        return sum(1 for a in self.activities if a.kind == kind)

    @cached_property
    def name_positions(self) -> dict[str, list[int]]:
        """Where the cpu_ops of each name are in `cpu_ops` (built on first use: a forward's ops repeat a
        few hundred names, which rules look up instead of scanning every op)."""
        if self.rows is None or self.columns is None:
            named: dict[str, list[int]] = defaultdict(list)
            for i, op in enumerate(self.cpu_ops):
                named[op.name].append(i)
            return named
        codes = self.columns.name[self.rows]
        order = np.argsort(codes, kind="stable")  # by name code, each name's ops in order
        bounds = np.flatnonzero(np.diff(codes[order], prepend=-1, append=-1)).tolist()
        names, firsts, at = self.columns.names, codes[order[bounds[:-1]]].tolist(), order.tolist()
        return {names[c]: at[lo:hi] for c, lo, hi in zip(firsts, bounds, bounds[1:], strict=False)}

    def ops_named(self, *names: str) -> list[Event]:
        """The cpu_ops with one of `names`, in `cpu_ops` order."""
        found = [at for n in dict.fromkeys(names) if (at := self.name_positions.get(n))]
        where = found[0] if len(found) == 1 else sorted(i for at in found for i in at)
        return list(map(self.cpu_ops.__getitem__, where))


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
    # what the rules' queries build once and share (analysis.queries.per); dies with the analysis
    caches: dict = field(repr=False, compare=False, default_factory=dict)

    @property
    def source(self) -> str:
        return self.trace.source


def analyze_trace(trace: Trace, region: str | None = None) -> Analysis:
    """Split `trace` into forwards of `region` (default: the most frequent annotation)."""
    annotations, (launch_rows, launch_events), gpu, op_rows = _split(trace)
    asked = region
    region = region or default_region(annotations)
    regions = _outermost(_region_events(annotations, region))
    launches, shared = _launches(launch_events)
    has_gpu = bool(gpu) or bool(launches)
    warnings = list(trace.warnings)
    if not regions and asked is None and len(op_rows):  # a plain `with profile(): model(x)` trace
        region, regions = WHOLE_TRACE, _whole_trace(list(map(trace.events.__getitem__, op_rows.tolist())))
        warnings.append("no record_function region and no profiler steps in the trace: analysed the whole "
                        "trace as one region (wrap each forward in record_function, or call prof.step(), "
                        "to get one region per forward)")
    if not regions:
        warnings.append(f"no '{region}' region in the trace; nothing attributed")
    picked = _shared_launches(gpu, launches, shared) if shared else {}
    per_region, orphans, outside = _attribute(gpu, launches, picked, _RegionLocator(regions))
    if orphans:
        warnings.append(f"{orphans} GPU activities match no launch event (kept as unattributed)")
    op_rows = op_rows[np.argsort(trace.columns.ts[op_rows], kind="stable")]  # by start, ties in trace order
    ops = list(map(trace.events.__getitem__, op_rows.tolist()))
    row_of_launch = dict(zip(map(id, launch_events), launch_rows.tolist(), strict=True))
    forwards, sealed = _forwards(trace, ops, op_rows, regions, per_region, row_of_launch)
    return Analysis(trace, region, forwards, has_gpu, orphans, outside, tuple(warnings),
                    OpIndex(ops, sealed, spans_at(trace.columns, op_rows, thread_codes(trace.columns))))


def _forwards(trace: Trace, ops: list[Event], rows: np.ndarray, regions: list[Event],
              per_region: dict[int, list[Activity]], row_of_launch: dict[int, int]
              ) -> tuple[list[Forward], list[Forward]]:
    """The forwards, and those whose region no other op of its process overlaps: none that starts in
    it ends after it, and none that starts before it reaches into it (the ops' running furthest end).
    `row_of_launch`: {id(launch event): its row}."""
    cols = trace.columns
    starts, pids = cols.ts[rows], cols.pid[rows]
    ends = starts + cols.dur[rows]
    pid_code = {p: i for i, p in enumerate(cols.pids)}
    forwards, sealed = [], []
    reach, seen = -math.inf, 0  # the furthest end (+ EPS) of ops[:seen]; regions come by start
    for i, r in enumerate(regions):
        lo = int(np.searchsorted(starts, r.ts, side="left"))
        hi = int(np.searchsorted(starts, r.ts + r.dur, side="right"))
        mine = pids[lo:hi] == pid_code.get(r.pid, -1)
        inside = mine & (ends[lo:hi] <= r.ts + r.dur + _EPS)
        at = np.flatnonzero(inside) + lo
        acts = per_region[i]
        launched = np.fromiter([row_of_launch[id(x.launch)] for x in acts], np.int64, len(acts))
        forwards.append(Forward(r, acts, list(map(ops.__getitem__, at.tolist())), rows[at], cols, launched))
        if lo > seen:
            reach, seen = max(reach, float(np.max(ends[seen:lo] + _EPS))), lo
        if np.count_nonzero(inside) == np.count_nonzero(mine) and reach < r.ts:
            sealed.append(forwards[-1])
    return forwards, sealed


def _split(trace: Trace) -> tuple[list[Event], tuple[np.ndarray, list[Event]], list[Event], np.ndarray]:
    """(annotations, (where the launches are, the launches), GPU activities, where the cpu_ops are), each
    in trace order."""
    cols, events = trace.columns, trace.events

    def rows(*cats: str) -> np.ndarray:
        return np.flatnonzero(np.isin(cols.cat, [cols.code("cats", c) for c in cats]))

    def of(*cats: str) -> list[Event]:
        return list(map(events.__getitem__, rows(*cats).tolist()))

    launches = (rows(*LAUNCH_CATEGORIES), of(*LAUNCH_CATEGORIES))
    return of("user_annotation"), launches, of(*GPU_CATEGORIES), rows("cpu_op")


def default_region(annotations: list[Event]) -> str:
    names = Counter(e.name for e in annotations if not PROFILER_STEP.fullmatch(e.name) and not COLLECTIVE.match(e.name)
                    and not TORCH_ANNOTATION.match(e.name))
    if names:
        return names.most_common(1)[0][0]  # ties: the first seen, since Counter keeps order
    return STEP_REGION


def region_names(trace: Trace) -> list[str]:
    """The regions a trace has, most frequent first: its annotations (less collectives), then
    `ProfilerStep#*` when it has profiler steps."""
    annotations = [e for e in trace.events if e.cat == "user_annotation"]
    names = Counter(e.name for e in annotations if not PROFILER_STEP.fullmatch(e.name) and not COLLECTIVE.match(e.name))
    steps = [STEP_REGION] if any(PROFILER_STEP.fullmatch(e.name) for e in annotations) else []
    return [name for name, _ in names.most_common()] + steps


def require_region(a: Analysis, asked: str | None) -> Analysis:
    """`a`, unless the user asked for a region the trace does not have: then a UserError naming those it has."""
    if asked is None or a.forwards:
        return a
    found = region_names(a.trace)
    shown = ", ".join(repr(n) for n in found[:REGIONS_SHOWN]) + (f" and {len(found) - REGIONS_SHOWN} more"
                                                                if len(found) > REGIONS_SHOWN else "")
    raise UserError(f"{a.source}: no region {asked!r} in the trace; it has " + (shown or "no regions") +
                    " (--region takes one of these)" * bool(found))


def _whole_trace(ops: list[Event]) -> list[Event]:
    """One region per process that ran host ops, from its first op's start to its last op's end."""
    spans: dict[int | str, list[float]] = {}
    for e in ops:
        lo_hi = spans.setdefault(e.pid, [e.ts, e.ts + e.dur, e.tid])
        lo_hi[0], lo_hi[1] = min(lo_hi[0], e.ts), max(lo_hi[1], e.ts + e.dur)
    return [Event(name=WHOLE_TRACE, cat="user_annotation", ph="X", ts=lo, dur=hi - lo, pid=pid, tid=tid)
            for pid, (lo, hi, tid) in spans.items()]


def _region_events(annotations: list[Event], region: str) -> list[Event]:
    if region == STEP_REGION:
        return [e for e in annotations if PROFILER_STEP.fullmatch(e.name)]
    return [e for e in annotations if e.name == region]


def _outermost(regions: list[Event]) -> list[Event]:
    """The regions by start, less each one inside an earlier one of its thread: a module that calls
    itself opens its region again within its own forward, and that is still one forward."""
    kept: list[Event] = []
    ends: dict[tuple, float] = {}
    for r in sorted(regions, key=lambda e: (e.ts, -e.dur)):
        thread = (r.pid, r.tid)
        if r.ts + r.dur <= ends.get(thread, -math.inf) + _EPS:
            continue
        ends[thread] = r.ts + r.dur
        kept.append(r)
    return kept


def _launches(launch_events: list[Event]) -> tuple[dict[int, Event], dict[int, list[Event]]]:
    """Launch events by correlation id, and apart the ids that several launches carry: each process
    counts its ids from 1, so two processes in one trace (merged ranks, a DataLoader worker) share them."""
    by_id: dict[int, Event] = {}
    shared: dict[int, list[Event]] = {}
    for e in launch_events:
        corr = e.args.correlation if e.args is not None else None
        if corr is None:
            continue
        if corr in by_id:
            shared.setdefault(corr, [by_id[corr]]).append(e)
        else:
            by_id[corr] = e
    return by_id, shared


def _shared_launches(gpu: list[Event], launches: dict[int, Event], shared: dict[int, list[Event]]
                     ) -> dict[int, Event]:
    """{id(activity): launch} for the activities whose correlation id several launches carry. The
    launch is the one of the activity's process (known from the ids no other process uses), else the
    latest to start before the activity (work runs after its launch), ties to the least used."""
    owners: dict[int | str, set] = defaultdict(set)  # GPU lane (its pid) -> the processes that launch on it
    for event in gpu:
        corr = event.args.correlation if event.args is not None else None
        if corr is not None and corr not in shared and corr in launches:
            owners[event.pid].add(launches[corr].pid)
    used: Counter = Counter()
    picked = {}
    for event in sorted((e for e in gpu if e.args is not None and e.args.correlation in shared), key=_TS):
        found = shared[event.args.correlation]
        found = [x for x in found if x.pid == event.pid or x.pid in owners[event.pid]] or found
        found = [x for x in found if x.ts <= event.ts] or found
        launch = max(found, key=lambda x: (x.ts, -used[id(x)]))
        used[id(launch)] += 1
        picked[id(event)] = launch
    return picked


def _attribute(
    gpu: list[Event], launches: dict[int, Event], picked: dict[int, Event], locate: _RegionLocator
) -> tuple[dict[int, list[Activity]], int, int]:
    """GPU activities per region index, by where their launch ran (`picked` by id(activity) where the
    correlation id is shared); plus orphans and outsiders."""
    per_region: dict[int, list[Activity]] = defaultdict(list)
    orphans = outside = 0
    for event in gpu:
        launch = picked.get(id(event)) if picked else None
        if launch is None:
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


class _RegionLocator:
    """Finds the region (same process) whose host time range holds an event's start."""

    def __init__(self, regions: list[Event]):
        self._index: dict[int | str, tuple[list[int], list[float], list[int]]] = {}
        by_pid: dict[int | str, list[int]] = defaultdict(list)
        for i, r in enumerate(regions):  # already sorted by start
            by_pid[r.pid].append(i)
        for pid, idx in by_pid.items():
            spans = [regions[i] for i in idx]
            self._index[pid] = (idx, [r.ts for r in spans], open_parents([r.ts for r in spans], [r.dur for r in spans]))
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


def median_int(values: list[int]) -> int:
    return int(statistics.median_low(values)) if values else 0


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def per_forward(a: Analysis) -> dict:
    """The per-forward facts of the `attnprof.analysis/1` contract (medians over forwards)."""
    f = a.forwards
    aten = [sum(len(at) for name, at in x.name_positions.items() if name.startswith("aten::")) for x in f]
    copies = [sum(len(at) for name, at in x.name_positions.items() if name in COPY_OPS) for x in f]
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
