"""Communication against computation on one GPU, per region instance. Imports no torch.

A collective hides under computation only while a compute kernel runs on the same GPU. So
exposed communication is measured on time itself, not on summed durations: the union of the
instance's NCCL kernel intervals, minus its intersection with the union of every other kernel
that ran on that GPU (whoever launched it: the previous step's tail hides communication too).
Two NCCL kernels on two streams that overlap count once.

Kernels are sorted into three kinds by name: NCCL (`ncclDevKernel_*`, `ncclKernel_*`), attention
kernels (`kernel_names.is_attention`, the one recognizer every rule uses), and the rest, which in a
ring is the merging of partial results and the copies around it (`CatArrayBatchedCopy`, elementwise
updates of out and lse).
"""

from __future__ import annotations

import statistics
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from operator import itemgetter

import numpy as np

from attnprof.analysis.activities import KINDS, first_seen_groups, take_activities
from attnprof.analysis.attribution import Analysis, Forward, all_gpu, rows_of
from attnprof.analysis.name_tests import name_tests, starting
from attnprof.analysis.queries import each_forward, gpu_named, median_over, per, per_fwd
from attnprof.gpu import kernel_names as kn
from attnprof.trace.reader import Event

Intervals = list[tuple[float, float]]  # sorted, disjoint, as `union` returns them
_START = itemgetter(0)

STRIP_BINS = 120  # characters in a timeline strip
# timeline strip states: exposed communication, communication under compute, compute alone, idle
EXPOSED, OVERLAPPED, COMPUTE, IDLE = "X", "O", "C", "."


is_comm = starting("nccl")  # a prefix test: the rules' queries run it on the names' bytes, no str per name



def union(spans) -> Intervals:
    """The union of (start, end) spans as sorted disjoint intervals."""
    pairs = list(spans)
    return union_of(*np.array(pairs, np.float64).reshape(-1, 2).T) if pairs else []


def union_of(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """`union` of the spans starts[k]..ends[k], by array operations: sorted by (start, end), a span opens a new
    interval where it starts after every earlier one has ended (one touching the reach so far joins it), and
    an interval ends at the furthest end of its spans; the same floats as a walk that extends the last one."""
    lo, hi = union_bounds(starts, ends)
    return list(zip(lo.tolist(), hi.tolist(), strict=True))


def union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """`length(union_of(starts, ends))` with no tuple per interval (a stream of a big trace has 100k+ kernels);
    summed by NumPy, so the last digits may differ from `length`'s left-to-right sum."""
    lo, hi = union_bounds(starts, ends)
    return float((hi - lo).sum())


def union_bounds(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The starts and ends of `union_of`'s intervals, as arrays."""
    if not len(starts):
        return np.zeros(0), np.zeros(0)
    order = np.lexsort((ends, starts))
    lo, hi = starts[order], ends[order]
    reach = np.maximum.accumulate(hi)
    opens = np.flatnonzero(np.concatenate(([True], lo[1:] > reach[:-1])))
    closes = np.append(opens[1:] - 1, len(lo) - 1)
    return lo[opens], reach[closes]


def length(intervals: Intervals) -> float:
    return sum(end - start for start, end in intervals)


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Where two unions overlap, by one sweep over both."""
    out: Intervals = []
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def clip(intervals: Intervals, start: float, end: float) -> Intervals:
    """The part of a union inside [start, end], found by bisection: a step's window of a whole trace's
    union costs the intervals in the window, not the trace."""
    lo = max(bisect_right(intervals, start, key=_START) - 1, 0)
    hi = bisect_left(intervals, end, key=_START)
    return intersect(intervals[lo:hi], [(start, end)])


@dataclass(frozen=True)
class InstanceFacts:
    """One region instance on one rank; times in µs, start/end on the trace's own clock."""

    start_us: float  # first GPU activity of the instance
    end_us: float  # last one's end
    nccl_kernels: int
    comm_us: float  # union of the instance's NCCL kernels
    compute_us: float  # union of its other kernels
    exposed_comm_us: float  # communication with no compute kernel running on that GPU
    attention_us: float  # the attention backend's kernels (summed)
    merge_us: float  # every other non-NCCL GPU activity (summed): merging, copies, memsets
    busy_us: float  # union of all its GPU activities
    comm_start_us: float | None = None  # its first NCCL kernel's start: when this rank reached a collective

    @property
    def overlap_fraction(self) -> float | None:
        return None if self.comm_us <= 0 else round(1.0 - self.exposed_comm_us / self.comm_us, 4)

    def as_dict(self) -> dict:
        return {**{k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()},
                "overlap_fraction": self.overlap_fraction}


def device_of(e: Event) -> int | str:
    """The GPU an activity ran on: its `device` argument, else the pid (Kineto's GPU rows)."""
    return e.args.device if e.args is not None and e.args.device is not None else e.pid


def compute_by_device(a: Analysis) -> dict[int | str, Intervals]:
    """Per GPU, the union of every non-NCCL kernel in the trace (once per analysis)."""
    return per(a, "compute union", a, _compute_by_device)


def _compute_by_device(a: Analysis) -> dict[int | str, Intervals]:
    """From the columns: the kernel rows, less NCCL's (by name code), each on its device (its args' device
    where they say, by args code, else its pid)."""
    cols = a.trace.columns
    rows = rows_of(cols, "kernel")
    rows = rows[~name_tests(a, is_comm)[cols.name[rows]]]
    said = [s.device for s in cols.arg_sets] + [None]  # args code -1: no args
    ts = cols.ts[rows]
    ends = ts + cols.dur[rows]
    devices: dict[int | str, list[np.ndarray]] = {}  # in the order their first kernel comes
    for group in first_seen_groups((cols.args[rows].astype(np.int64) + 1) * len(cols.pids) + cols.pid[rows]):
        first = rows[group[0]]  # a group: the kernels of one args code (-1: none) and one process
        device = said[int(cols.args[first])]
        devices.setdefault(device if device is not None else cols.pids[int(cols.pid[first])], []).append(group)
    return {dev: union_of(ts[at], ends[at]) for dev, groups in devices.items() for at in [np.concatenate(groups)]}


def has_comm(a: Analysis) -> bool:
    def build(x: Analysis) -> bool:
        gpu = all_gpu(x)
        return bool(np.any(gpu_named(x, gpu, is_comm) & (gpu.kind == KINDS.index("kernel"))))
    return per(a, "has comm", a, build)


def is_nccl(name: str) -> bool:
    """An NCCL kernel, by its name (the kernels the ranks' tables list)."""
    return name.startswith("nccl")


def top_merge_kernels(a: Analysis, top: int) -> list[dict]:
    """The `top` GPU activities that are neither communication nor an attention kernel (the ring's merging
    and copies), by name: how many per instance (a mean: a count) and their time per instance, the median over
    the instances (queries.median_over: the statistic of every time shown per instance), costliest first."""
    gpu = all_gpu(a)
    attention = (gpu.kind == KINDS.index("kernel")) & gpu_named(a, gpu, kn.is_attention, kn.ATTENTION)
    kept = np.flatnonzero(~gpu_named(a, gpu, is_comm) & ~attention)
    rows = [{"kernel": kn.short_name(gpu.names[int(gpu.name[kept[at[0]]])]),
             "per_instance": per_fwd(len(at), a), "us_per_instance": median_over(each_forward(a, kept[at]))}
            for at in first_seen_groups(gpu.name[kept])]
    return sorted(rows, key=lambda r: -r["us_per_instance"])[:top]  # stable: ties stay first seen first


def names_passing(a: Analysis, test: Callable[[str], bool]) -> dict[str, int]:
    """How many GPU activities of each name that passes `test`, first seen first."""
    gpu = all_gpu(a)
    at = np.flatnonzero(gpu_named(a, gpu, test))
    return {gpu.names[int(gpu.name[at[g[0]]])]: len(g) for g in first_seen_groups(gpu.name[at])}


def instance_facts(a: Analysis, fwd: Forward, compute: dict[int | str, Intervals]) -> InstanceFacts | None:
    """The facts of one region instance; None when it launched no GPU work. From the forward's GPU columns;
    only its NCCL kernels are made into activities (their device is in their args)."""
    gpu = fwd.gpu
    if not len(gpu.dur):
        return None
    kernel = gpu.kind == KINDS.index("kernel")
    nccl = kernel & gpu_named(a, gpu, is_comm)
    attention = kernel & ~nccl & gpu_named(a, gpu, kn.is_attention, kn.ATTENTION)
    ends = gpu.ts + gpu.dur  # as Event.end adds them
    ts, end = gpu.ts.tolist(), ends.tolist()
    comm_spans: dict[int | str, list[tuple[float, float]]] = defaultdict(list)
    for act in take_activities(fwd.activities, np.flatnonzero(nccl).tolist()):
        comm_spans[device_of(act.event)].append((act.event.ts, act.event.end))
    comm = exposed = 0.0
    for dev, spans in comm_spans.items():
        mine = union(spans)
        comm += length(mine)
        if mine:
            busy = clip(compute.get(dev, []), mine[0][0], mine[-1][1])
            exposed += length(mine) - length(intersect(mine, busy))
    own = kernel & ~nccl
    return InstanceFacts(
        start_us=min(ts), end_us=max(end), nccl_kernels=int(np.count_nonzero(nccl)), comm_us=comm,
        compute_us=length(union_of(gpu.ts[own], ends[own])), exposed_comm_us=exposed,
        attention_us=sum(gpu.dur[attention].tolist(), 0.0), merge_us=sum(gpu.dur[~nccl & ~attention].tolist(), 0.0),
        busy_us=length(union_of(gpu.ts, ends)), comm_start_us=min(gpu.ts[nccl].tolist(), default=None))


def all_instances(a: Analysis) -> list[InstanceFacts]:
    """Every instance's facts, once per analysis (the summary and two rules read them)."""
    return per(a, "comm instances", a, _all_instances)


def _all_instances(a: Analysis) -> list[InstanceFacts]:
    compute = compute_by_device(a)
    return [f for f in (instance_facts(a, fwd, compute) for fwd in a.forwards) if f is not None]


def median_facts(facts: list[InstanceFacts]) -> dict:
    """Medians over instances of every field (overlap from the median comm and exposed times)."""
    if not facts:
        return {}
    out = {}
    for name in ("nccl_kernels", "comm_us", "compute_us", "exposed_comm_us", "attention_us", "merge_us", "busy_us"):
        values = [getattr(f, name) for f in facts]
        median = statistics.median_low(values) if name == "nccl_kernels" else round(statistics.median(values), 3)
        out[name] = median
    out["span_us"] = round(statistics.median(f.end_us - f.start_us for f in facts), 3)
    comm = out["comm_us"]
    out["overlap_fraction"] = None if comm <= 0 else round(1.0 - out["exposed_comm_us"] / comm, 4)
    return out


def timeline_strip(a: Analysis, fwd: Forward, compute: dict[int | str, Intervals], bins: int = STRIP_BINS) -> str:
    """One character per slice of the instance's GPU window, by what most of the slice was spent on:
    X exposed communication, O communication under compute, C compute alone, . idle. From the forward's
    GPU columns (only its first activity is made, for its device)."""
    gpu = fwd.gpu
    if not len(gpu.dur):
        return ""
    ends = gpu.ts + gpu.dur  # as Event.end adds them
    start, end = min(gpu.ts.tolist()), max(ends.tolist())
    dev = device_of(take_activities(fwd.activities, [0])[0].event)
    at = (gpu.kind == KINDS.index("kernel")) & gpu_named(a, gpu, is_comm)
    comm = clip(union_of(gpu.ts[at], ends[at]), start, end)
    busy = clip(compute.get(dev, []), start, end)
    width = max(end - start, 1e-9) / bins
    o, cm, cp = (_per_bin(x, start, width, bins) for x in (intersect(comm, busy), comm, busy))
    strip = []
    for i in range(bins):
        shares = {OVERLAPPED: o[i], EXPOSED: cm[i] - o[i], COMPUTE: cp[i] - o[i], IDLE: width - cm[i] - cp[i] + o[i]}
        strip.append(max(shares, key=shares.__getitem__))
    return "".join(strip)


def _per_bin(intervals: Intervals, start: float, width: float, bins: int) -> list[float]:
    """`length(clip(intervals, lo, hi))` of every bin [lo, hi) by one sweep: the same pieces, summed in the
    same order, so the same floats."""
    out, j = [], 0
    for i in range(bins):
        lo, hi = start + i * width, start + (i + 1) * width
        while j < len(intervals) and intervals[j][1] <= lo:
            j += 1
        total, k = 0, j
        while k < len(intervals) and intervals[k][0] < hi:
            piece_start, piece_end = max(intervals[k][0], lo), min(intervals[k][1], hi)
            if piece_start < piece_end:
                total += piece_end - piece_start
            k += 1
        out.append(total)
    return out


