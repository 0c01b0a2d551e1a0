"""The attention calls of a region, found from its host ops (and their recorded shapes, when the trace has
them) and its kernels: hand-written (matmul/bmm -> [mask] -> softmax -> matmul/bmm), SDPA (by backend; entered
by `aten::scaled_dot_product_attention`, or in a compiled graph by its backend op itself), nn.MultiheadAttention's
fast path (`aten::_native_multi_head_attention`), flex_attention's Triton kernel, other fused kernels (by
`kernel_names.is_attention`: the hub's and `flash_attn::*` ops' flash-attn, FlashInfer, vLLM, ...). Shared by the
rules about attention workloads; a training step's backward is left out (its nodes are autograd's, not the
calls)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from attnprof.analysis import launches, phases
from attnprof.analysis import queries as q
from attnprof.analysis.activities import KINDS, gathered, gpu_durations, subset, take_activities
from attnprof.analysis.attribution import Activity, Analysis, Forward
from attnprof.analysis.columns import distinct
from attnprof.analysis.name_tests import Among, starting
from attnprof.analysis.nesting import EPS
from attnprof.analysis.ops import ATTENTION_ENTRY_OPS, MHA_OP, SDPA_BACKEND_OPS, SDPA_OP
from attnprof.analysis.rows import runs, take
from attnprof.gpu import kernel_names as kn
from attnprof.gpu.attention_kernels import is_backward_name
from attnprof.trace.reader import Args, Event

MATMULS = frozenset({"aten::matmul", "aten::bmm", "aten::einsum", "aten::baddbmm"})
SOFTMAXES = frozenset({"aten::softmax", "aten::_softmax", "aten::_safe_softmax"})
REACH = 6  # ops between a matmul and the softmax it feeds (scale, mask, casts, dropout)
FLEX = "flex_"  # in the names of flex_attention's and flex_decoding's Triton kernels


@dataclass(slots=True)
class Call:
    """One attention call: how it is implemented, its outermost host ops, its GPU work."""

    implementation: str  # hand-written | sdpa | flex | fused kernel
    ops: Sequence[Event]  # host ops of the call, in order (one for SDPA; the chain when hand-written, as rows)
    activities: Sequence[Activity] = field(default_factory=list)  # rows where the forward's are
    backend: str | None = None  # SDPA's backend; the fused kernel's family
    names: list[str] = field(default_factory=list)  # the ops' names (given where the ops are rows)

    def __post_init__(self) -> None:
        if not self.names:
            self.names = [op.name for op in self.ops]

    @property
    def label(self) -> str:
        return f"{self.implementation} ({self.backend})" if self.backend else self.implementation

    @property
    def gpu_us(self) -> float:
        return sum(gpu_durations(self.activities).tolist())  # left to right, as a walk would

    @property
    def host_us(self) -> float:
        return sum(op.dur for op in self.ops)

    def time_us(self, has_gpu: bool) -> float:
        """GPU time on a GPU trace, host time on a CPU trace."""
        return self.gpu_us if has_gpu else self.host_us


@dataclass(frozen=True)
class TopOps:
    """One thread's outermost aten ops of the forward phase, in start order: where they are in the
    forward's cpu_ops and their starts (made into events, their names into str, only where a rule keeps one:
    a trace of unique names has thousands)."""

    at: list[int]
    ts: np.ndarray
    positions: np.ndarray = field(repr=False, compare=False)  # `at` as an array (what the gathers take)


def top_ops(a: Analysis, fwd: Forward) -> dict[tuple, TopOps]:
    """Per (pid, tid) thread, the outermost aten ops of the forward phase in start order: what user code called."""
    return q.per(a, "top ops", fwd, lambda f: _top_ops(a, f))


def _top_ops(a: Analysis, fwd: Forward) -> dict[tuple, TopOps]:
    """Where a walk down the op tree from its roots stops: past the backward ops, into the other non-aten
    ops, stopping at each aten op (all at once: `OpTree.outermost`). A thread's are in start order (two of
    them never start together: the later in nesting order would be inside the other), the threads in the
    order the walk meets them."""
    backward = q.names_passing(a, fwd, starting(phases.BACKWARD_OP))
    found, root = q.op_tree(a, fwd).outermost(q.names_passing(a, fwd, starting("aten::")) | backward)
    kept = ~backward[found]
    found, root = found[kept], root[kept]
    spans = q.op_columns(a, fwd, found)
    keys = {code: key for key, code in spans.threads.items()}
    out: dict[tuple, TopOps] = {}
    for code in sorted(distinct(spans.thread).tolist(), key=lambda c: int(root[spans.thread == c].min())):
        mine = np.flatnonzero(spans.thread == code)
        mine = mine[np.argsort(spans.ts[mine], kind="stable")]
        out[keys[code]] = TopOps(found[mine].tolist(), spans.ts[mine], found[mine])
    return out


def calls(a: Analysis, fwd: Forward) -> list[Call]:
    """Every attention call of a forward, in start order (built once per forward)."""
    return q.per(a, "attention calls", fwd, lambda f: _calls(a, f))


def _calls(a: Analysis, fwd: Forward) -> list[Call]:
    found: list[Call] = []
    launched: list[np.ndarray] = []  # per call found: where its activities are in fwd.activities
    starts: list[float] = []  # per call found: its first op's start (else its kernel's)
    tops = list(top_ops(a, fwd).values())
    softmax, matmul, sdpa_ops = (q.names_passing(a, fwd, Among(tuple(sorted(names))))
                                 for names in (SOFTMAXES, MATMULS, ATTENTION_ENTRY_OPS))
    chains = [chain_bounds(softmax[top.positions], matmul[top.positions], REACH) for top in tops]  # no str per op
    take(fwd.cpu_ops, sorted({top.at[before] for top, bounds in zip(tops, chains, strict=True)
                              for before, _ in bounds}))  # the chains' first ops (what is read of them), at once
    for top, bounds in zip(tops, chains, strict=True):
        sdpa = np.flatnonzero(sdpa_ops[top.positions]).tolist()
        spans = [(before, after + 1) for before, after in bounds]  # matmul...matmul
        mine = _launched_by(a, fwd, top.positions, spans + [(i, i + 1) for i in sdpa])
        acts = [subset(fwd.activities, at) for at in mine]  # rows: made only where a rule asks
        names = _cut(fwd.names_at([i for lo, hi in spans for i in top.at[lo:hi]]), spans)  # all calls' at once
        found += [Call("hand-written", ops, act, names=n)
                  for ops, act, n in zip(runs(fwd.cpu_ops, top.positions, spans), acts, names, strict=False)]
        starts += top.ts[[lo for lo, _ in spans]].tolist()
        for i, act in zip(sdpa, acts[len(spans):], strict=True):
            op = fwd.cpu_ops[top.at[i]]
            found.append(Call("multi-head attention" if op.name == MHA_OP else "sdpa", [op], act,
                              backend=SDPA_BACKEND_OPS.get(op.name) or sdpa_backend_of(a, fwd, op)))
            starts.append(op.ts)
        launched += mine
    claimed = np.zeros(len(fwd.activities), np.bool_)
    if launched:
        claimed[np.concatenate(launched)] = True
    unclaimed = [i for i in _attention_kernels(a, fwd) if not claimed[i]]
    for act in take_activities(fwd.activities, unclaimed):
        info = kn.decode(act.event.name)
        host = _launching_op(a, fwd, act)
        kind = "flex" if FLEX in act.event.name else "fused kernel"
        found.append(Call(kind, [host] if host else [], [act], None if kind == "flex" else info.family))
        starts.append(host.ts if host else act.event.ts)
    return [found[i] for i in sorted(range(len(found)), key=starts.__getitem__)]  # by start, ties as found


def _cut(values: list, spans: list[tuple[int, int]]) -> list[list]:
    """`values`, laid span after span (hi - lo of each), cut back into a list per span."""
    out, start = [], 0
    for lo, hi in spans:
        out.append(values[start : start + hi - lo])
        start += hi - lo
    return out


def _attention_kernels(a: Analysis, fwd: Forward) -> list[int]:
    """Where the forward-phase attention kernels (by name) are, in order: launched outside every autograd node
    on their thread, and not named a backward kernel (one a hand-called backward launched is no forward call)."""
    kernels = (fwd.gpu.kind == KINDS.index("kernel")) & ~phases.launched_in_backward(a, fwd)
    forward = ~q.gpu_named(a, fwd.gpu, backward_attention_kernel, kn.ATTENTION)
    return np.flatnonzero(kernels & forward & q.gpu_named(a, fwd.gpu, attention_kernel, kn.ATTENTION)).tolist()


def attention_kernel(name: str) -> bool:
    """Whether a GPU activity's name is an attention kernel's (flex's included): `kernel_names.is_attention`."""
    return kn.is_attention(name)


def backward_attention_kernel(name: str) -> bool:
    """Whether a GPU activity's name is an attention kernel's that computes gradients (dQ, dK, dV)."""
    return kn.is_attention(name) and is_backward_name(name)


def _launched_by(a: Analysis, fwd: Forward, at: np.ndarray, calls: list[tuple[int, int]]) -> list[np.ndarray]:
    """Per call (lo, hi) of the cpu_ops at positions `at[lo:hi]`: where the forward-phase activities launched
    inside them are in `fwd.activities`, in order (the launches under every op found at once; each call's a
    view of one array)."""
    if not calls:
        return []
    hits = launches.under_spans(a, fwd, q.op_columns(a, fwd, at))
    lo, hi = np.array(calls, np.int64).T
    merged = hits.merged(lo, hi, keep=~phases.launched_in_backward(a, fwd))
    bounds = merged.bounds.tolist()
    return [merged.where[bounds[k] : bounds[k + 1]] for k in range(len(merged))]


def chain_bounds(softmax: np.ndarray, matmul: np.ndarray, reach: int) -> list[tuple[int, int]]:
    """Where hand-written chains are in a run of ops (the forward's top ops; the backward's autograd nodes),
    given per op whether it is a softmax and whether a matmul: (first, last) of each softmax with a matmul on
    each side within `reach` ops, chains not overlapping. Only the softmaxes are visited."""
    matmuls = np.flatnonzero(matmul)
    softmaxes = np.flatnonzero(softmax)
    before = np.searchsorted(matmuls, softmaxes, side="left") - 1  # the nearest matmul before each softmax
    after = np.searchsorted(matmuls, softmaxes, side="right")  # and after it
    found_before = np.where(before >= 0, matmuls[np.maximum(before, 0)] if len(matmuls) else -1, -1).tolist()
    found_after = np.where(after < len(matmuls), matmuls[np.minimum(after, len(matmuls) - 1)]
                           if len(matmuls) else -1, -1).tolist()
    out, last_end, n = [], -1, len(softmax)
    for i, j, k in zip(softmaxes.tolist(), found_before, found_after, strict=True):
        if i <= last_end:
            continue
        if j > max(i - reach - 2, last_end) and 0 <= k < min(i + reach + 2, n):
            out.append((j, k))
            last_end = k
    return out


def marks(codes: np.ndarray, names: Sequence[str], *sets: frozenset[str]) -> list[np.ndarray]:
    """Per set, per op (`codes`: its name's place in `names`): whether its name is in the set."""
    return [np.fromiter((n in s for n in names), np.bool_, len(names))[codes] for s in sets]


def sdpa_backend_of(a: Analysis, fwd: Forward, op: Event) -> str | None:
    """The backend op under the SDPA call (or the MHA fast path's); under autocast the call casts its inputs and
    calls itself again (aten::scaled_dot_product_attention inside aten::scaled_dot_product_attention), so look
    there."""
    for child in q.op_tree(a, fwd).children(op):
        if child.name in SDPA_BACKEND_OPS:
            return SDPA_BACKEND_OPS[child.name]
        if child.name == SDPA_OP:
            return sdpa_backend_of(a, fwd, child)
    return None


def sdpa_entries(fwd: Forward) -> list[Event]:
    """The forward's SDPA calls by the op each is entered by: `aten::scaled_dot_product_attention`, and each
    backend op with no such op around it on its thread (a compiled graph calls the backend op itself)."""
    outer = fwd.ops_named(SDPA_OP)
    spans: dict[tuple, list[tuple[float, float]]] = {}
    for op in outer:
        spans.setdefault((op.pid, op.tid), []).append((op.ts, op.ts + op.dur + EPS))
    bare = [op for op in fwd.ops_named(*SDPA_BACKEND_OPS)
            if not any(lo <= op.ts and op.ts + op.dur <= hi for lo, hi in spans.get((op.pid, op.tid), ()))]
    return sorted(outer + bare, key=lambda op: op.ts)


def _launching_op(a: Analysis, fwd: Forward, act: Activity) -> Event | None:
    """The innermost host op around a launch (flex: the Triton kernel's own op, with its shapes)."""
    chain = launches.launch_chain(a, act, fwd)
    return chain[-1] if chain else None


def inside(a: Analysis, fwd: Forward, outer: Event, name: str) -> list[Event]:
    """The forward's ops called `name` nested in `outer` (same thread, within its span)."""
    end = outer.ts + outer.dur + EPS
    return [op for op in fwd.ops_named(name)
            if op.pid == outer.pid and op.tid == outer.tid and outer.ts <= op.ts and op.ts + op.dur <= end]


def dims(op: Event | None, arg: int) -> list[int] | None:
    """Input `arg`'s dims from record_shapes; None without shapes or when it is not a tensor."""
    return input_dims(op.args if op is not None else None, arg)


def input_dims(args: Args | None, arg: int) -> list[int] | None:
    """`dims` of an op whose args these are."""
    found = args.input_dims if args is not None else None
    if not found or len(found) <= arg or not isinstance(found[arg], list) or not found[arg]:
        return None
    return found[arg] if all(isinstance(d, int) for d in found[arg]) else None


def region_time_us(a: Analysis, fwd: Forward) -> float:
    """What a region took: GPU busy time on a GPU trace, the region's host time on a CPU trace."""
    return fwd.gpu_time_us if a.has_gpu else fwd.region.dur


def summary(a: Analysis) -> list[dict]:
    """Each implementation's calls per forward, GPU (else host) time per forward with its spread, and share of
    the region: medians over the forwards, as the region's own time is (queries.median_over: a part never
    exceeds its whole); worked out once per analysis (hand-written-attention's evidence and the analysis dict
    both show it)."""
    return [dict(row) for row in q.per(a, "attention summary", a, _summary)]


def _summary(a: Analysis) -> list[dict]:
    n = len(a.forwards)
    groups: dict[str, tuple[list[float], list[int]]] = {}  # per label: its time and calls in each forward
    for i, fwd in enumerate(a.forwards):
        found = calls(a, fwd)
        for call, took in zip(found, times_us(a, found), strict=True):
            times, counts = groups.setdefault(call.label, ([0.0] * n, [0] * n))
            times[i] += took
            counts[i] += 1
    region = q.median_over([region_time_us(a, f) for f in a.forwards])
    rows = []
    for label, (times, counts) in groups.items():
        t = q.spread_over(times)
        rows.append({"implementation": label, "calls_per_forward": q.median_over(counts),
                     "time_us_per_forward": t["median"], "time_us_spread": [t["p25"], t["p75"]],
                     "share": round(t["median"] / region, 4) if region else None})
    return sorted(rows, key=lambda r: -r["time_us_per_forward"])


def times_us(a: Analysis, found: list[Call]) -> list[float]:
    """`call.time_us(a.has_gpu)` of each call: on a GPU trace the durations of a forward's calls read in one
    gather (a big trace has tens of thousands of calls), each call's added left to right as `gpu_us` does."""
    if not a.has_gpu:
        return [call.host_us for call in found]
    return [sum(d) for d in gathered([call.activities for call in found], lambda gpu, where: gpu.dur[where].tolist())]
