"""Attention inside a whole model's training step: every attention call of the step, forward and backward,
by layer, and attention's share of the step. Imports no torch.

The forward's calls are the attention query's (SDPA by backend, flex, hand-written chains, fused kernels:
the hub's and ours). The backward's are autograd nodes: SDPA's, flex's and a fused kernel's own node
(`ScaledDotProductFlashAttentionBackward0`, `FlexAttention...Backward`, `AttentionFunctionBackward`), a node
that launches an attention kernel, or a hand-written chain of nodes (a softmax's backward between two
matmuls' backward). Nothing in a trace names the layer, so the layer is the call's place in its pass: a
forward pass is a run of forward calls with no backward call between them, layer 0 first; the backward
visits the layers in reverse. So gradient accumulation (several passes in one step) lands on the right
layers, and a forward with no backward (an evaluation inside the region) still has its layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attnprof.analysis import attention_calls as _attention
from attnprof.analysis import launches, phases, queries
from attnprof.analysis.activities import gathered, gpu_columns, kernel_names
from attnprof.analysis.attribution import Analysis, Forward
from attnprof.analysis.columns import Hits, Spans
from attnprof.analysis.name_tests import Among
from attnprof.analysis.queries import per
from attnprof.analysis.rows import first_starts
from attnprof.gpu import kernel_names as kn

SDPA_NODE_BACKENDS = (("Cudnn", "cudnn"), ("Flash", "flash"), ("Efficient", "efficient"), ("Math", "math"))
SOFTMAX_NODES = frozenset({"SoftmaxBackward0", "SafeSoftmaxBackward0", "_SafeSoftmaxBackward0"})
MATMUL_NODES = frozenset({"BmmBackward0", "MmBackward0", "MatmulBackward0", "BaddbmmBackward0", "EinsumBackward0"})
# names every layer's MLP and residual have too: evidence naming only these does not place a finding
GENERIC = (_attention.MATMULS | {phases.BACKWARD_OP + name for name in MATMUL_NODES}
           | {f"aten::{op}" for op in ("add", "mul", "to", "_to_copy", "copy_", "view", "reshape", "transpose",
                                       "expand", "clone", "contiguous", "mm")})
LABEL_PARTS = ("scaleddotproduct", "attention", "attn")  # what `_label_by_name` looks for, lowered
NODE_REACH = 8  # backward nodes between a softmax's and a matmul's (views, expands, casts, mask, scale)
MATH = "sdpa (math)"
FUSED = "fused kernel"


@dataclass
class StepCall:
    """One attention call of a step, in one phase, with the time it took and the layer it ran in."""

    phase: str  # forward | backward
    label: str  # hand-written | sdpa (flash) | flex | fused kernel (...)
    op_names: list[str]  # of its host ops (forward) or autograd nodes (backward)
    ts: float  # the start of its first op, else of its first GPU activity
    time_us: float  # GPU time of its activities on a GPU trace, host time of its ops on a CPU trace
    kernel_names: list[str] = field(default_factory=list)  # of its GPU activities
    layer: int = -1


def step_calls(a: Analysis, fwd: Forward) -> list[StepCall]:
    """Every attention call of one region, forward and backward, in start order, each with its layer."""
    return per(a, "step attention calls", fwd, lambda f: _layered(_forward_calls(a, f) + _backward_calls(a, f)))


def _forward_calls(a: Analysis, fwd: Forward) -> list[StepCall]:
    """The forward's attention calls, their starts, times and kernel names read in one gather for all."""
    calls = _attention.calls(a, fwd)
    each = [call.activities for call in calls]
    times = ([sum(d) for d in gathered(each, lambda gpu, at: gpu.dur[at].tolist())] if a.has_gpu
             else [call.host_us for call in calls])  # `Call.time_us`, read together
    starts = [ts if ts is not None else float(gpu_columns(call.activities).ts[0])
              for call, ts in zip(calls, first_starts([call.ops for call in calls]), strict=True)]
    return [StepCall("forward", call.label, list(call.names), start, time, names)
            for call, start, time, names in zip(calls, starts, times, kernel_names(each), strict=True)]


def _backward_calls(a: Analysis, fwd: Forward) -> list[StepCall]:
    """The attention nodes of the backward, per thread in start order: hand-written chains (a softmax's
    backward with a matmul's backward on each side within NODE_REACH), then the nodes named or launching
    attention; the GPU work under every node looked up once for all of them, by array operations (a
    whole model's step has tens of thousands of nodes a region, a few hundred of them attention)."""
    spans = phases.backward_spans(a, fwd)
    nodes = spans.positions  # in fwd.cpu_ops; made into events only for the calls found
    softmax, matmul = (queries.names_passing(a, fwd, Among(tuple(sorted(phases.BACKWARD_OP + n for n in kinds))))[nodes]
                       for kinds in (SOFTMAX_NODES, MATMUL_NODES))
    maybe = np.flatnonzero(queries.names_may_hold(a, fwd, nodes, LABEL_PARTS))  # the few named as attention
    by_name = dict(zip(maybe.tolist(), map(_label_by_name, [name.removeprefix(phases.BACKWARD_OP) for name in
                                                           fwd.names_at(nodes[maybe].tolist())]), strict=True))
    hits = launches.under_spans(a, fwd, spans.columns) if a.has_gpu else None
    telling = np.zeros(len(nodes), np.bool_)
    telling[[i for i, label in by_name.items() if label is not None]] = True
    if hits is not None:  # or launching a kernel of flex or attention (the others cannot be told by kernels)
        telling |= hits.any_of(queries.gpu_named(a, fwd.gpu, _attention.attention_kernel, kn.ATTENTION))
    found: list[tuple[str, list[int]]] = []  # (label, the call's nodes)
    for at in _thread_runs(spans.columns.thread):  # by thread, each in start order
        bounds = _attention.chain_bounds(softmax[at], matmul[at], NODE_REACH)
        taken = np.zeros(len(at), np.bool_)
        for before, after in bounds:
            taken[before : after + 1] = True
        run = at.tolist()
        found += [("hand-written", run[before : after + 1]) for before, after in bounds]
        found += [(label, [i]) for i in at[~taken & telling[at]].tolist()
                  if (label := by_name.get(i) or _label_by_kernels(fwd, hits, i))]
    called = fwd.names_at(nodes[[i for _, mine in found for i in mine]].tolist())  # the calls' nodes' names only
    ends = np.cumsum([len(mine) for _, mine in found]).tolist()
    op_names = [called[end - len(mine) : end] for (_, mine), end in zip(found, ends, strict=True)]
    if hits is None:  # a CPU trace: the nodes' host time
        return [StepCall("backward", label, names, float(spans.columns.ts[mine[0]]),
                         sum(spans.columns.dur[mine].tolist())) for (label, mine), names in zip(found, op_names,
                                                                                                   strict=True)]
    return _gpu_step_calls(fwd, spans.columns, found, op_names, hits)


def _thread_runs(thread: np.ndarray) -> list[np.ndarray]:
    """The positions of each thread's nodes, a run each (`phases.Spans` keeps a thread's nodes together)."""
    return np.split(np.arange(len(thread)), np.flatnonzero(np.diff(thread)) + 1)


def _gpu_step_calls(fwd: Forward, nodes: Spans, found: list[tuple[str, list[int]]], names: list[list[str]],
                    hits: Hits) -> list[StepCall]:
    """The backward calls `found` ((label, where its nodes are in `nodes`), their nodes called `names`) of a
    GPU trace: their time and kernel names from the GPU work under their nodes, read in one gather for all."""
    lo = np.array([mine[0] for _, mine in found], np.int64)
    hi = np.array([mine[-1] + 1 for _, mine in found], np.int64)  # a call's nodes are a run of its thread's
    launched = hits.merged(lo, hi)
    flat = launched.where
    durs, kernels = fwd.gpu.dur[flat].tolist(), fwd.gpu.names_at(flat)
    starts = nodes.ts[lo].tolist()
    bounds = launched.bounds.tolist()
    return [StepCall("backward", label, mine, start, sum(durs[b:e]), kernels[b:e])
            for (label, _), mine, start, b, e in zip(found, names, starts, bounds[:-1], bounds[1:], strict=True)]


def _label_by_name(name: str) -> str | None:
    """What attention a backward node is, by its name (less the evaluate_function prefix)."""
    if "ScaledDotProduct" in name:
        backend = next((b for key, b in SDPA_NODE_BACKENDS if key in name), None)
        return f"sdpa ({backend})" if backend else "sdpa"
    if "FlexAttention" in name:
        return "flex"
    if "attention" in name.lower() or "attn" in name.lower():
        return f"{FUSED} ({name.removesuffix('Backward').removesuffix('Backward0')})"
    return None


def _label_by_kernels(fwd: Forward, hits: Hits | None, i: int) -> str | None:
    """What attention a node of no telling name is by the kernels it launched (`launched`: their places
    in `fwd.activities`): a compiled graph's node (flex's backward under torch.compile), a hub kernel's."""
    if hits is None or not hits[i]:
        return None
    gpu = fwd.gpu
    kernels = [gpu.names[c] for c in gpu.name[sorted(set(hits[i]))].tolist()]  # from the columns: none made
    if any(_attention.FLEX in k for k in kernels):
        return "flex"
    family = next((kn.decode(k).family for k in kernels if kn.is_attention(k)), None)
    return f"{FUSED} ({family})" if family else None


def _layered(found: list[StepCall]) -> list[StepCall]:
    """Layers by place in the pass: runs of one phase; forward runs count up, backward runs count down. A
    backward chain of plain nodes under SDPA's math backend is that SDPA call's backward, not user code."""
    found.sort(key=lambda call: call.ts)
    run: list[StepCall] = []
    for call in [*found, None]:
        if run and (call is None or call.phase != run[0].phase):
            for i, done in enumerate(run):
                done.layer = i if done.phase == "forward" else len(run) - 1 - i
            run = []
        if call is not None:
            run.append(call)
    forward = {call.layer: call.label for call in found if call.phase == "forward"}
    for call in found:
        if call.phase == "backward" and _same_call(call.label, forward.get(call.layer)):
            call.label = forward[call.layer]
    return found


def _same_call(backward: str, forward: str | None) -> bool:
    """Whether a backward is its layer's forward's, named less well: SDPA's math backward is a chain of plain
    nodes, a fused kernel's backward node is named after its autograd.Function, not the kernel's family."""
    if forward is None:
        return False
    return (backward == "hand-written" and forward == MATH) or (
        backward.startswith(FUSED) and forward.startswith(FUSED))


def summary(a: Analysis, findings: list[dict] | tuple = ()) -> dict | None:
    """Attention's share of the step (forward, backward, both), the implementations that ran, one row per
    layer (per step: the median over the regions, as every time per forward is) and where each of `findings`
    occurs; None when no region holds an attention call."""
    each = [step_calls(a, fwd) for fwd in a.forwards]  # medians over the regions (queries.median_over)
    calls = [call for found in each for call in found]
    if not calls:
        return None
    step = queries.median_over([_attention.region_time_us(a, f) for f in a.forwards])
    time = {p: queries.median_over([sum(c.time_us for c in found if c.phase == p) for found in each])
            for p in phases.PHASES}
    share = {p: round(t / step, 4) if step else None for p, t in time.items()}
    total = queries.median_over([sum(c.time_us for c in found) for found in each])
    share["total"] = round(total / step, 4) if step else None
    layers, names = _layer_rows(each, step)
    placed = [place(f, names) for f in findings]
    for row in layers:
        row["findings"] = [f["id"] for f in placed if row["layer"] in f["layers"]]
    totals = [row["time_us"] for row in layers]
    return {"unit": phases.unit(a), "time_basis": "GPU time" if a.has_gpu else "host time",
            "step_us": round(step, 3), "attention_us": {p: round(t, 3) for p, t in time.items()}, "share": share,
            "implementations": sorted({c.label for c in calls}),
            "passes": sum(1 for c in calls if c.phase == "forward" and c.layer == 0) / len(each),
            "layers": layers,
            "spread": {"min_us": min(totals), "max_us": max(totals),
                       "max_over_min": round(max(totals) / min(totals), 3) if min(totals) else None},
            "findings": placed}


def place(finding: dict, names: dict[int, set[str]]) -> dict:
    """A finding at the layers whose attention calls its evidence names (an op or a kernel of theirs other than
    a bare matmul, which every layer's MLP has too); no layer: it is about the step outside attention."""
    said = set(_strings(finding.get("evidence")))
    layers = [layer for layer, mine in names.items() if (mine - GENERIC) & said]
    return {"id": finding["id"], "severity": finding["severity"], "cost_us": finding["cost_us"],
            "message": finding["message"], "layers": layers}


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):  # evidence keys name things too (kernels by name)
        value = [*value.keys(), *value.values()]
    return [s for v in value for s in _strings(v)] if isinstance(value, (list, tuple)) else []


def _layer_rows(each: list[list[StepCall]], step: float) -> tuple[list[dict], dict[int, set[str]]]:
    """One row per layer (times: medians over the regions `each` holds the calls of), and the names of the
    ops and kernels of each layer's calls."""
    n = len(each)
    rows: dict[int, dict] = {}
    names: dict[int, set[str]] = {}
    for i, found in enumerate(each):
        for call in found:
            row = rows.setdefault(call.layer, {"layer": call.layer, "implementations": [], "calls": 0,
                                               "forward": [0.0] * n, "backward": [0.0] * n})
            row[call.phase][i] += call.time_us
            row["calls"] += 1
            if call.label not in row["implementations"]:
                row["implementations"].append(call.label)
            names.setdefault(call.layer, set()).update(call.op_names, call.kernel_names)
    out = []
    for layer in sorted(rows):
        row = rows[layer]
        fwd, bwd = row.pop("forward"), row.pop("backward")
        total = queries.median_over([f + b for f, b in zip(fwd, bwd, strict=True)])
        out.append({**row, "calls": round(row["calls"] / n, 3), "forward_us": queries.median_over(fwd),
                    "backward_us": queries.median_over(bwd), "time_us": total,
                    "share": round(total / step, 4) if step else None})
    return out, names
