"""Forward and backward inside a training step. Imports no torch.

The autograd engine runs each backward node inside an `autograd::engine::evaluate_function: <Node>`
op, on its own device thread for CUDA work (on the calling thread for CPU work), never on the
thread that called backward(). So a GPU activity is backward work when its launch lies inside such
an op on the launch's own thread, and a host op is when it lies inside one on its thread; the rest
of the region is the forward. A region holding no such op is a plain forward.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import compress

import numpy as np

from attnprof.analysis import columns
from attnprof.analysis import queries as q
from attnprof.analysis.activities import KINDS
from attnprof.analysis.attribution import Activity, Analysis, Forward, median, median_int
from attnprof.analysis.launches import launch_spans
from attnprof.analysis.name_tests import starting
from attnprof.analysis.nesting import EPS
from attnprof.analysis.queries import per

BACKWARD_OP = "autograd::engine::evaluate_function: "
PHASES = ("forward", "backward")
# Kineto's 2021 schema records each autograd node as an op of its own name (`CudnnConvolutionBackward`,
# `torch::autograd::AccumulateGrad`) on the engine's thread, with no evaluate_function around it
_NODE_2021 = re.compile(r"\w+Backward\d*|torch::autograd::AccumulateGrad")


@dataclass(frozen=True)
class _BackwardNode:
    """The test "the op runs an autograd node", in today's schema and 2021's (`name_tests` keeps its answers)."""

    def __call__(self, name: str) -> bool:
        return name.startswith(BACKWARD_OP) or _NODE_2021.fullmatch(name) is not None


BACKWARD_NODE = _BackwardNode()


class Spans:
    """The outermost backward ops of a forward, per thread (nested ones add nothing): where they are in
    the forward's cpu_ops and their columns, by thread (the earliest-starting thread first), each
    thread's in start order."""

    def __init__(self, cols: columns.Spans, where: np.ndarray):
        """`cols`: the columns of the forward's backward ops, `where`: their places in its cpu_ops."""
        at = _outermost(cols)  # where they are among the spans given
        self._positions = where[at].astype(np.int32)
        self.columns = cols.take(at)  # what `columns.held_by` asks of every op at once
        self.host_us = sum(self.columns.dur.tolist())  # in this order, as a sum over the ops adds up

    def __len__(self) -> int:
        return len(self._positions)

    @property
    def positions(self) -> np.ndarray:
        """Where they are in the forward's cpu_ops (an array: what is read of them is gathered by it)."""
        return self._positions


def _outermost(cols: columns.Spans) -> np.ndarray:
    """Per thread (the earliest-starting first), by start (the longer first), the spans that start after
    the last one kept has ended (+ EPS); as an array (a training step's region has tens of thousands)."""
    order = columns.nesting_order(cols)  # by start, the longer first; stable
    thread = cols.thread[order]
    codes = columns.distinct(thread)
    firsts = [int(np.argmax(thread == c)) for c in codes.tolist()]  # a region has a few threads
    kept = [_kept(order[thread == c], cols) for c in codes[np.argsort(firsts)].tolist()]
    return np.concatenate(kept) if kept else np.zeros(0, np.intp)


def _kept(mine: np.ndarray, cols: columns.Spans) -> np.ndarray:
    """`_outermost` of one thread's spans (`mine`, in order). Those that start after every earlier span
    has ended, when that is also what the walk keeps (checked: a span kept only because it outlasts one
    that was not kept would differ); else the walk, span by span."""
    ts, held = cols.ts[mine], cols.end[mine] + EPS
    before = np.maximum.accumulate(np.r_[-np.inf, held[:-1]])  # the furthest end of the earlier spans
    kept = ts > before
    last = np.maximum.accumulate(np.where(kept, np.arange(len(mine)), -1))  # the latest kept, at or before
    reach = np.r_[-np.inf, held[last[:-1]]]  # the end of the latest kept before each
    if np.array_equal(kept, ts > reach):
        return mine[kept]
    out, reach_ = [], -np.inf
    for i, t, h in zip(mine.tolist(), ts.tolist(), held.tolist(), strict=True):
        if t > reach_:
            out.append(i)
            reach_ = h
    return np.array(out, np.intp)


def backward_spans(a: Analysis, fwd: Forward) -> Spans:
    """The backward ops of a forward (built once per forward)."""
    def build(f: Forward) -> Spans:
        at = np.flatnonzero(q.names_passing(a, f, BACKWARD_NODE))
        return Spans(q.op_columns(a, f, at), at)
    return per(a, "backward spans", fwd, build)


def has_backward(a: Analysis) -> bool:
    return per(a, "has backward", a, lambda x: any(len(backward_spans(x, f)) for f in x.forwards))


def unit(a: Analysis) -> str:
    """What one region is: a training "step" (it holds backward work) or a "forward"."""
    return "step" if has_backward(a) else "forward"


def launched_in_backward(a: Analysis, fwd: Forward) -> np.ndarray:
    """Per GPU activity of the forward: whether its launch ran inside a backward op on its thread (built
    once per forward)."""
    def build(f: Forward) -> np.ndarray:
        launched, launches = launch_spans(a, f)
        back = np.zeros(len(f.activities), np.bool_)
        spans = backward_spans(a, f)
        if len(spans) and launched:
            back[launched] = columns.held_by(spans.columns, launches, EPS)
        return back
    return per(a, "launched in backward", fwd, build)


def split(a: Analysis, fwd: Forward) -> dict[str, list[Activity]]:
    """The forward's GPU activities by phase, by where their launch ran."""
    back = launched_in_backward(a, fwd)
    return {"forward": list(compress(fwd.activities, ~back)), "backward": list(compress(fwd.activities, back))}


def in_phase(a: Analysis, fwd: Forward, phase: str) -> list[Activity]:
    return per(a, "split", fwd, lambda f: split(a, f))[phase]


def aten_in_backward(a: Analysis, fwd: Forward) -> int:
    """How many of the forward's aten ops are backward work: inside a backward op on their thread (an aten op
    is never one itself); only the aten ops' columns are cut (built once per forward)."""
    def build(f: Forward) -> int:
        spans = backward_spans(a, f)
        if not len(spans):
            return 0
        aten = q.op_columns(a, f, np.flatnonzero(q.names_passing(a, f, starting("aten::"))))
        return int(np.count_nonzero(columns.held_by(spans.columns, aten, EPS)))
    return per(a, "aten in backward", fwd, build)


def phase_facts(a: Analysis) -> dict | None:
    """Per phase, medians over the steps: GPU activities (all, kernels, memcpy, memset), GPU time, aten
    ops and host time (the backward's: its outermost backward ops; the forward's: the rest of the
    region). None when no region holds backward work."""
    if not has_backward(a):
        return None
    return {phase: _facts(a, phase) for phase in PHASES}


def _facts(a: Analysis, phase: str) -> dict:
    aten, host, counts, times = [], [], [], []
    for f in a.forwards:
        spans = backward_spans(a, f)
        backward_aten = aten_in_backward(a, f)
        aten.append(backward_aten if phase == "backward" else
                    int(np.count_nonzero(q.names_passing(a, f, starting("aten::")))) - backward_aten)
        host.append(spans.host_us if phase == "backward" else f.region.dur - spans.host_us)
        launched = launched_in_backward(a, f)
        at = np.flatnonzero(launched if phase == "backward" else ~launched)
        kinds = np.bincount(f.gpu.kind[at], minlength=len(KINDS)).tolist()
        counts.append([len(at), *(kinds[KINDS.index(k)] for k in ("kernel", "memcpy", "memset"))])
        times.append(sum(f.gpu.dur[at].tolist()))  # left to right, as a walk over the activities
    per_kind = zip(*counts, strict=True)  # per kind, its count in each step
    gpu = dict(zip(("gpu_ops", "kernels", "memcpy", "memset"), map(median_int, map(list, per_kind)), strict=True))
    gpu["gpu_time_us"] = round(median(times), 3)
    if not a.has_gpu:
        gpu = dict.fromkeys(gpu)
    return {**gpu, "aten_ops": median_int(aten), "cpu_time_us": round(median(host), 3)}
