"""Attribute GPU work to the regions that launched it. Imports no torch.

A GPU activity (kernel, memcpy, memset) belongs to the forward whose `record_function`
range holds its *launch* (the `cuda_runtime`/`cuda_driver` event with the same
`args.correlation`), never to the range its own GPU timestamps fall in: GPU work runs
late, so a GPU-time window holds work launched by the step before.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter

import numpy as np

from attnprof.analysis import join
from attnprof.analysis.activities import (
    KINDS,
    Activity,
    ActivityRows,
    GpuColumns,
    MadeActivities,
    columns_of_events,
    columns_of_rows,
)
from attnprof.analysis.columns import distinct, names_of, spans_at, thread_codes
from attnprof.analysis.name_tests import Among, passing, starting
from attnprof.analysis.nesting import EPS as _EPS
from attnprof.analysis.nesting import OpIndex
from attnprof.analysis.regions import PROFILER_STEP as PROFILER_STEP  # re-exported: the regions' names
from attnprof.analysis.regions import (
    REGIONS_SHOWN,
    WHOLE_TRACE,
    annotation_rows,
    default_region,
    outermost,
    region_events,
    region_names,
    rows_of,
    short_of_half,
    whole_trace,
)
from attnprof.analysis.regions import STEP_REGION as STEP_REGION
from attnprof.analysis.rows import Made, OpRows, take
from attnprof.analysis.streams import overlap_warning
from attnprof.errors import UserError
from attnprof.trace.columns import Columns
from attnprof.trace.reader import GPU_CATEGORIES, LAUNCH_CATEGORIES, Args, Event, Trace

COPY_OPS = ("aten::copy_",)  # every real data copy on the host goes through copy_
_TS = attrgetter("ts")
ALL_GPU = "all gpu"  # the key of every forward's GPU columns in Analysis.caches


@dataclass(frozen=True)
class Forward:
    region: Event
    activities: Sequence[Activity]  # in trace order (made on demand: activities.ActivityRows)
    cpu_ops: Sequence[Event]  # every cpu_op inside the region, nested ones included (made on demand: rows.OpRows)
    # where the cpu_ops are in the trace's columns (None for a forward made from some of another's ops)
    rows: np.ndarray | None = field(default=None, repr=False, compare=False)
    columns: Columns | None = field(default=None, repr=False, compare=False)  # the trace's, with `rows`
    launch_rows: np.ndarray | None = field(default=None, repr=False, compare=False)  # per activity, with `rows`

    @cached_property
    def gpu(self) -> GpuColumns:
        """The activities as columns (what the rules that look at all of them read)."""
        acts = self.activities
        return acts.columns if isinstance(acts, ActivityRows) else columns_of_events(acts)

    @cached_property
    def gpu_time_us(self) -> float:
        return sum(self.gpu.dur.tolist())  # left to right, as the per-activity sum was

    def count(self, kind: str) -> int:
        return int(np.count_nonzero(self.gpu.kind == KINDS.index(kind)))

    @cached_property
    def _named(self) -> dict[str, list[int] | np.ndarray]:
        """`positions_named`'s answers so far (or all of them, for a forward made from events)."""
        if self.rows is None or self.columns is None:
            named: dict[str, list[int]] = defaultdict(list)
            for i, op in enumerate(self.cpu_ops):
                named[op.name].append(i)
            return named
        return {}

    def positions_named(self, name: str) -> list[int]:
        """Where the cpu_ops called `name` are in `cpu_ops`, in order (one array comparison of the name
        codes per name asked for, kept: rules ask for a few names, a whole model's forward has 100k+ ops)."""
        found = self._named.get(name)
        if found is None and self.rows is not None and self.columns is not None:
            code = self.columns.code("names", name)
            mine = self.columns.name[self.rows] == code if code >= 0 else np.zeros(0, np.bool_)
            found = self._named[name] = np.flatnonzero(mine).astype(np.int32)  # kept: 4 bytes a position
        return found.tolist() if isinstance(found, np.ndarray) else found or []

    def names_at(self, at: list[int]) -> list[str]:
        """The names of the cpu_ops at positions `at` (from the name codes: no event made)."""
        if self.rows is None or self.columns is None:
            return [self.cpu_ops[i].name for i in at]
        return names_of(self.columns.names, self.columns.name[self.rows[at]].tolist())

    def name_codes(self, at: list[int] | np.ndarray) -> tuple[np.ndarray, list[str]]:
        """The names of the cpu_ops at positions `at` as codes into a list of the distinct ones (each
        decoded once; a training step's backward has tens of thousands of nodes a region)."""
        if self.rows is None or self.columns is None:
            table: dict[str, int] = {}
            return np.array([table.setdefault(n, len(table)) for n in self.names_at(list(at))], np.int64), list(table)
        codes = self.columns.name[self.rows[at]]
        found = distinct(codes)
        return np.searchsorted(found, codes), list(map(self.columns.names.__getitem__, found.tolist()))

    def args_at(self, at: list[int]) -> list[Args | None]:
        """The args of the cpu_ops at positions `at` (less the correlation, from the trace's table of
        distinct args: no event made)."""
        if self.rows is None or self.columns is None:
            return [self.cpu_ops[i].args for i in at]
        sets = [*self.columns.arg_sets, None]  # args code -1: none
        return list(map(sets.__getitem__, self.columns.args[self.rows[at]].tolist()))

    def ops_named(self, *names: str) -> list[Event]:
        """The cpu_ops with one of `names`, in `cpu_ops` order."""
        found = [at for n in dict.fromkeys(names) if (at := self.positions_named(n))]
        where = found[0] if len(found) == 1 else sorted(i for at in found for i in at)
        return take(self.cpu_ops, where)


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
    # the rows of the GPU activities left out: (matching no launch, launched outside every region)
    left_out: tuple[np.ndarray, np.ndarray] = field(repr=False, compare=False,
                                                    default=(np.zeros(0, np.intp), np.zeros(0, np.intp)))

    @property
    def source(self) -> str:
        return self.trace.source


def analyze_trace(trace: Trace, region: str | None = None) -> Analysis:
    """Split `trace` into forwards of `region` (default: the region that holds the most GPU work,
    regions.default_region; WHOLE_TRACE: the whole trace, one region per process)."""
    cols = trace.columns
    annotations = trace.events_at(annotation_rows(cols))
    launch_rows, gpu_rows = rows_of(cols, *LAUNCH_CATEGORIES), rows_of(cols, *GPU_CATEGORIES)
    op_rows = rows_of(cols, "cpu_op")
    launched = join.launches_of(cols, launch_rows, gpu_rows)  # per GPU activity: its launch's row, -1: none
    has_gpu = len(gpu_rows) > 0 or bool(np.any(cols.corr[launch_rows] != join.NONE))
    warnings = list(trace.warnings)
    region, regions = _regions(annotations, cols, region, launched, gpu_rows, op_rows, launch_rows, warnings)
    if has_gpu and not len(gpu_rows):
        warnings.append(f"the trace has {len(launch_rows)} launch event(s) but no GPU activity (kernel, memcpy, "
                        "memset): its device activities were not recorded (profile with ProfilerActivity.CUDA; "
                        "CUPTI's profiler-range mode records none)")
    slot = np.full(len(gpu_rows), -1, np.int64)
    slot[launched >= 0] = join.regions_of(regions, cols, launched[launched >= 0])
    left_out = (gpu_rows[launched < 0], gpu_rows[(launched >= 0) & (slot < 0)])  # no launch; outside the regions
    orphans, outside = len(left_out[0]), len(left_out[1])
    if orphans:
        warnings.append(f"{orphans} GPU activities match no launch event (kept as unattributed)")
    warnings += short_of_half(region, cols, gpu_rows, slot >= 0) if regions else []
    warnings += overlap_warning(cols, gpu_rows)
    op_rows = op_rows[np.argsort(cols.ts[op_rows], kind="stable")].astype(np.int32)  # by start, ties in trace order
    ops = OpRows(Made(trace), op_rows)
    per_region, every = _activities(MadeActivities(trace, gpu_rows, launch_rows), len(regions), gpu_rows, launched,
                                    slot)
    forwards, sealed = _forwards(trace, ops, op_rows, regions, per_region)
    if region == STEP_REGION:
        forwards, sealed = _without_empty_steps(forwards, sealed, warnings)
    return Analysis(trace, region, forwards, has_gpu, orphans, outside, tuple(warnings),
                    OpIndex(ops, sealed, lambda: spans_at(cols, op_rows, thread_codes(cols))), {ALL_GPU: every},
                    left_out)


def _regions(annotations: list[Event], cols: Columns, asked: str | None, launched: np.ndarray, gpu_rows: np.ndarray,
             op_rows: np.ndarray, launch_rows: np.ndarray, warnings: list[str]) -> tuple[str, list[Event]]:
    """(the region's name, its instances): the one asked for, else the default; the whole trace when asked,
    or when none is found and the trace has host ops or launches (a GPU-only trace has only launches)."""
    region = asked or default_region(annotations, cols, launched, gpu_rows)
    regions = outermost(region_events(annotations, region)) if region != WHOLE_TRACE else []
    host = op_rows if len(op_rows) else launch_rows
    if not regions and (asked is None or asked == WHOLE_TRACE) and len(host):  # `with profile(): model(x)`
        if asked is None and annotations:
            warnings.append("no region of the trace holds a launch of its GPU work: analysed the whole trace as "
                            "one region per process")
        elif asked is None:
            warnings.append("no record_function region and no profiler steps in the trace: analysed the whole "
                            "trace as one region (wrap each forward in record_function, or call prof.step(), "
                            "to get one region per forward)")
        return WHOLE_TRACE, whole_trace(cols, host)
    if not regions:
        warnings.append(f"no '{region}' region in the trace; nothing attributed")
    return region, regions


def _without_empty_steps(forwards: list[Forward], sealed: list[Forward],
                         warnings: list[str]) -> tuple[list[Forward], list[Forward]]:
    """The profiler steps less those that hold no host op and no GPU work (the step torch.profiler opens as it
    stops: a median over steps would count it as a step of nothing), said in a warning; all, if all are."""
    kept = [f for f in forwards if len(f.activities) or len(f.cpu_ops)]
    if not kept or len(kept) == len(forwards):
        return forwards, sealed
    warnings.append(f"left out {len(forwards) - len(kept)} empty profiler step(s): no host op and no GPU work "
                    "in them (the step the profiler opens as it stops)")
    ids = {id(f) for f in kept}
    return kept, [f for f in sealed if id(f) in ids]


def _activities(made: MadeActivities, regions: int, gpu_rows: np.ndarray, launched: np.ndarray,
                slot: np.ndarray) -> tuple[list[ActivityRows], GpuColumns]:
    """Per region: its GPU activities in trace order (rows; made when a rule asks, a launch once for all
    the activities it started); and the columns of them all, region after region (each forward's a view)."""
    kept = np.flatnonzero(slot >= 0)
    kept = kept[np.argsort(slot[kept], kind="stable")]
    rows, launches = gpu_rows[kept], launched[kept]
    bounds = np.flatnonzero(np.diff(slot[kept], prepend=-1, append=-1)).tolist()
    every = columns_of_rows(made.trace.columns, rows, launches)
    per_region = [ActivityRows(made, rows[:0], launches[:0], every.cut(0, 0))] * regions
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        per_region[int(slot[kept[lo]])] = ActivityRows(made, rows[lo:hi], launches[lo:hi], every.cut(lo, hi))
    return per_region, every


def _forwards(trace: Trace, ops: OpRows, rows: np.ndarray, regions: list[Event],
              per_region: list[ActivityRows]) -> tuple[list[Forward], list[Forward]]:
    """The forwards, and those whose region no other op of its process overlaps: none that starts in
    it ends after it, and none that starts before it reaches into it (the ops' running furthest end)."""
    cols = trace.columns
    starts = cols.ts[rows]  # what each region's ops are searched in; their ends and processes are cut per region
    pid_code = {p: i for i, p in enumerate(cols.pids)}
    forwards, sealed = [], []
    reach, seen = -math.inf, 0  # the furthest end (+ EPS) of ops[:seen]; regions come by start
    for i, r in enumerate(regions):
        lo = int(np.searchsorted(starts, r.ts, side="left"))
        hi = int(np.searchsorted(starts, r.ts + r.dur, side="right"))
        mine = cols.pid[rows[lo:hi]] == pid_code.get(r.pid, -1)
        inside = mine & (starts[lo:hi] + cols.dur[rows[lo:hi]] <= r.ts + r.dur + _EPS)
        whole = bool(inside.all())  # the usual case: a view of the trace's op rows, not a copy
        acts, mine_rows = per_region[i], rows[lo:hi] if whole else rows[np.flatnonzero(inside) + lo]
        forwards.append(Forward(r, acts, OpRows(ops.made, mine_rows), mine_rows, cols, acts.launch))
        if lo > seen:
            reach, seen = max(reach, float(np.max(starts[seen:lo] + cols.dur[rows[seen:lo]] + _EPS))), lo
        if (whole or np.count_nonzero(inside) == np.count_nonzero(mine)) and reach < r.ts:
            sealed.append(forwards[-1])
    return forwards, sealed


def require_region(a: Analysis, asked: str | None) -> Analysis:
    """`a`, unless the user asked for a region the trace does not have: then a UserError naming those it has."""
    if asked is None or a.forwards:
        return a
    found = region_names(a.trace)
    shown = ", ".join(repr(n) for n in found[:REGIONS_SHOWN]) + (f" and {len(found) - REGIONS_SHOWN} more"
                                                                if len(found) > REGIONS_SHOWN else "")
    takes = f"one of these, or '{WHOLE_TRACE}'" if found else f"'{WHOLE_TRACE}'"
    raise UserError(f"{a.source}: no region {asked!r} in the trace; it has {shown or 'no regions'} (--region takes "
                    f"{takes}: the whole trace)")


def median_int(values: list[int]) -> int:
    return int(statistics.median_low(values)) if values else 0


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def per_forward(a: Analysis) -> dict:
    """The per-forward facts of the `attnprof.analysis/1` contract (medians over forwards)."""
    f = a.forwards
    aten = [_count_named(a, x, starting("aten::")) for x in f]
    copies = [_count_named(a, x, Among(COPY_OPS)) for x in f]
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


def _count_named(a: Analysis, fwd: Forward, test: Callable[[str], bool]) -> int:
    """How many of the forward's cpu_ops have a name that passes `test`: each distinct name of the trace
    tested once per analysis (a trace whose names are all unique has 100k+), the ops counted by name code."""
    if fwd.rows is None or fwd.columns is None:
        return sum(1 for op in fwd.cpu_ops if test(op.name))
    return int(np.count_nonzero(passing(a, test, fwd.columns.name[fwd.rows])))


def all_gpu(a: Analysis) -> GpuColumns:
    """Every forward's activities as columns, in forward order (built once per analysis)."""
    if ALL_GPU not in a.caches:  # an analysis made of forwards cut from another's (lint)
        a.caches[ALL_GPU] = columns_of_events([act for f in a.forwards for act in f.activities])
    return a.caches[ALL_GPU]
