"""The regions of a trace: which annotation is a forward (by default the one that holds the most GPU work:
the profiler steps, unless an annotation inside them holds all of it; or the whole trace), and each region
instance, outermost only. Imports no torch."""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np

from attnprof.analysis import join
from attnprof.analysis.nesting import EPS as _EPS
from attnprof.trace.columns import Columns
from attnprof.trace.reader import Event, Trace

PROFILER_STEP = re.compile(r"ProfilerStep#\d+")
STEP_REGION = "ProfilerStep#*"
# c10d wraps each collective in an annotation named after it (`nccl:all_to_all`): communication, not a region
COLLECTIVE = re.compile(r"(nccl|gloo|mpi|ucc|xccl):")
# torch annotates each DataLoader batch and optimizer call itself: a training loop's, not the user's regions
TORCH_ANNOTATION = re.compile(r"(enumerate\(DataLoader\)|Optimizer\.\w+)#")
WHOLE_TRACE = "(whole trace)"  # the region of a trace with neither annotations nor profiler steps (or asked)
REGIONS_SHOWN = 8  # region names an error lists
HALF = 0.5  # a region holding less of the trace's GPU time than this is said to, loudly
CANDIDATES = 32  # annotation names weighed for the default region: the most frequent, and the longest on the host


def rows_of(cols: Columns, *cats: str) -> np.ndarray:
    """Where the events of these categories are, in trace order (one pass over the category codes, through a
    table of the trace's categories: np.isin makes several temporaries as long as the trace)."""
    wanted = np.zeros(len(cols.cats), np.bool_)
    wanted[[code for code in (cols.code("cats", c) for c in cats) if code >= 0]] = True
    return np.flatnonzero(wanted[cols.cat])


def annotation_rows(cols: Columns) -> np.ndarray:
    """Where the region-making events are, in trace order: the `user_annotation`s, and the profiler steps
    written as host ops (Kineto's 2021 schema writes every record_function range as an `Operator`)."""
    steps = np.flatnonzero(cols.names.starting_with("ProfilerStep#")[cols.name])
    return np.union1d(rows_of(cols, "user_annotation"), steps[cols.cat[steps] == cols.code("cats", "cpu_op")])


def _user_names(annotations: list[Event]) -> Counter:
    """The user's annotation names by how often they come: no profiler steps, collectives, or torch's own."""
    return Counter(e.name for e in annotations if not PROFILER_STEP.fullmatch(e.name) and not COLLECTIVE.match(e.name)
                   and not TORCH_ANNOTATION.match(e.name))


def default_region(annotations: list[Event], cols: Columns | None = None, launched: np.ndarray | None = None,
                   gpu_rows: np.ndarray | None = None) -> str:
    """The region that holds the most GPU work (`launched`: per GPU activity of `gpu_rows`, its launch's
    row, -1 for none), not the most frequent one: a sampled trace's most frequent annotation can hold 6 of
    1,204 activities. Equal work goes to the user's annotation over the profiler steps (a forward inside
    each step: the finer unit), then to the most frequent. Without GPU work (a CPU trace): the most frequent
    annotation, else the profiler steps."""
    names = _user_names(annotations)
    steps = [STEP_REGION] if any(PROFILER_STEP.fullmatch(e.name) for e in annotations) else []
    if cols is None or launched is None or gpu_rows is None or not np.any(launched >= 0):
        return names.most_common(1)[0][0] if names else STEP_REGION  # ties: the first seen (Counter keeps order)
    rank = {name: i for i, (name, _) in enumerate(names.most_common())}
    longest = Counter()
    for e in outermost([e for e in annotations if e.name in rank]):
        longest[e.name] += e.dur
    weighed = [*steps, *dict.fromkeys([n for n, _ in names.most_common(CANDIDATES)] +
                                      [n for n, _ in longest.most_common(CANDIDATES)])]
    held = launched >= 0
    launches, dur = launched[held], cols.dur[gpu_rows[held]]

    def work(name: str) -> tuple:
        inside = join.regions_of(outermost(region_events(annotations, name)), cols, launches) >= 0
        return np.count_nonzero(inside) > 0, float(np.sum(dur[inside])), name != STEP_REGION, -rank.get(name, 0)
    scores = {name: work(name) for name in weighed}
    best = max(scores, key=scores.__getitem__) if scores else None
    # no region holds a launch (the steps on another process than the launches, say): the whole trace
    return best if best is not None and scores[best][0] else WHOLE_TRACE


def region_names(trace: Trace) -> list[str]:
    """The regions a trace has, most frequent first: its annotations (less collectives), then
    `ProfilerStep#*` when it has profiler steps."""
    annotations = trace.events_at(annotation_rows(trace.columns))
    names = Counter(e.name for e in annotations if not PROFILER_STEP.fullmatch(e.name) and not COLLECTIVE.match(e.name))
    steps = [STEP_REGION] if any(PROFILER_STEP.fullmatch(e.name) for e in annotations) else []
    return [name for name, _ in names.most_common()] + steps


def whole_trace(cols: Columns, rows: np.ndarray) -> list[Event]:
    """One region per process that ran host ops (`rows`, in trace order), from its first op's start to its
    last op's end, on the thread of its first op; processes in the order their first op comes."""
    pids = cols.pid[rows]
    codes, first = np.unique(pids, return_index=True)
    out = []
    for code, at in sorted(zip(codes.tolist(), first.tolist(), strict=True), key=lambda x: x[1]):
        mine = rows[pids == code]
        lo, hi = float(cols.ts[mine].min()), float((cols.ts[mine] + cols.dur[mine]).max())
        out.append(Event(name=WHOLE_TRACE, cat="user_annotation", ph="X", ts=lo, dur=hi - lo, pid=cols.pids[code],
                         tid=cols.threads[cols.thread[rows[at]]][1]))
    return out


def region_events(annotations: list[Event], region: str) -> list[Event]:
    if region == STEP_REGION:
        return [e for e in annotations if PROFILER_STEP.fullmatch(e.name)]
    return [e for e in annotations if e.name == region]


def outermost(regions: list[Event]) -> list[Event]:
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


def short_of_half(region: str, cols: Columns, gpu_rows: np.ndarray, held: np.ndarray) -> list[str]:
    """A warning when the region's instances hold under half of the trace's GPU time (`held`: per activity of
    `gpu_rows`, whether a region holds it; a trace of zero-length activities weighed by count)."""
    dur = cols.dur[gpu_rows]
    total, inside = float(dur.sum()), float(dur[held].sum())
    share = inside / total if total > 0 else (np.count_nonzero(held) / len(held) if len(held) else 1.0)
    if share >= HALF:
        return []
    return [f"region {region!r} holds only {share:.0%} of the trace's GPU time ({np.count_nonzero(held)} of "
            f"{len(held)} GPU activities): the figures per region describe a small part of the work "
            f"(--region picks another; '(whole trace)' takes all of it)"]
