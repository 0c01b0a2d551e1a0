"""Forward and backward inside a training step. Imports no torch.

The autograd engine runs each backward node inside an `autograd::engine::evaluate_function: <Node>`
op, on its own device thread for CUDA work (on the calling thread for CPU work), never on the
thread that called backward(). So a GPU activity is backward work when its launch lies inside such
an op on the launch's own thread, and a host op is when it lies inside one on its thread; the rest
of the region is the forward. A region holding no such op is a plain forward.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict

from attnprof.analysis.attribution import Activity, Analysis, Forward, median, median_int
from attnprof.analysis.queries import per
from attnprof.trace.nesting import EPS
from attnprof.trace.reader import Event

BACKWARD_OP = "autograd::engine::evaluate_function: "
PHASES = ("forward", "backward")


class Spans:
    """The outermost backward ops of a forward, per thread: whether an event lies inside one."""

    def __init__(self, ops: list[Event]):
        outer: dict[tuple, list[Event]] = defaultdict(list)
        for op in sorted(ops, key=lambda e: (e.ts, -e.dur)):
            mine = outer[(op.pid, op.tid)]
            if not mine or op.ts > mine[-1].ts + mine[-1].dur + EPS:  # nested ones add nothing
                mine.append(op)
        self.ops = [op for mine in outer.values() for op in mine]
        self._starts = {key: [op.ts for op in mine] for key, mine in outer.items()}
        self._spans = dict(outer)

    def holds(self, event: Event | None) -> bool:
        if event is None:
            return False
        starts = self._starts.get((event.pid, event.tid))
        if not starts:
            return False
        j = bisect_right(starts, event.ts) - 1
        if j < 0:
            return False
        op = self._spans[(event.pid, event.tid)][j]
        return event is not op and event.ts + event.dur <= op.ts + op.dur + EPS

    @property
    def host_us(self) -> float:
        return sum(op.dur for op in self.ops)


def backward_spans(a: Analysis, fwd: Forward) -> Spans:
    """The backward ops of a forward (built once per forward)."""
    return per(a, "backward spans", fwd, lambda f: Spans([op for op in f.cpu_ops if op.name.startswith(BACKWARD_OP)]))


def has_backward(a: Analysis) -> bool:
    return per(a, "has backward", a, lambda x: any(backward_spans(x, f).ops for f in x.forwards))


def unit(a: Analysis) -> str:
    """What one region is: a training "step" (it holds backward work) or a "forward"."""
    return "step" if has_backward(a) else "forward"


def split(a: Analysis, fwd: Forward) -> dict[str, list[Activity]]:
    """The forward's GPU activities by phase, by where their launch ran."""
    spans = backward_spans(a, fwd)
    out: dict[str, list[Activity]] = {"forward": [], "backward": []}
    for act in fwd.activities:
        out["backward" if spans.holds(act.launch) else "forward"].append(act)
    return out


def in_phase(a: Analysis, fwd: Forward, phase: str) -> list[Activity]:
    return per(a, "split", fwd, lambda f: split(a, f))[phase]


def forward_ops(a: Analysis, fwd: Forward) -> list[Event]:
    """The host ops of the forward phase (all of them in a plain forward)."""
    spans = backward_spans(a, fwd)
    if not spans.ops:
        return fwd.cpu_ops
    return per(a, "forward ops", fwd, lambda f: [op for op in f.cpu_ops if not _in_backward(spans, op)])


def _in_backward(spans: Spans, op: Event) -> bool:
    return op.name.startswith(BACKWARD_OP) or spans.holds(op)


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
        mine = [_in_backward(spans, op) == (phase == "backward") for op in f.cpu_ops]
        aten.append(sum(1 for op, m in zip(f.cpu_ops, mine, strict=True) if m and op.name.startswith("aten::")))
        host.append(spans.host_us if phase == "backward" else f.region.dur - spans.host_us)
        acts = in_phase(a, f, phase)
        counts.append([len(acts), *(sum(1 for x in acts if x.kind == k) for k in ("kernel", "memcpy", "memset"))])
        times.append(sum(x.event.dur for x in acts))
    columns = zip(*counts, strict=True)  # per kind, its count in each step
    gpu = dict(zip(("gpu_ops", "kernels", "memcpy", "memset"), map(median_int, map(list, columns)), strict=True))
    gpu["gpu_time_us"] = round(median(times), 3)
    if not a.has_gpu:
        gpu = dict.fromkeys(gpu)
    return {**gpu, "aten_ops": median_int(aten), "cpu_time_us": round(median(host), 3)}
