"""Helpers the rules share: the finding record, per-forward arithmetic, host-op nesting."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from ..analysis import Activity, Analysis, Forward
from ..kernel_names import SIXTEEN_BIT, decode
from ..trace import Event

WARN_SHARE = 0.05  # a cost of 5% of a forward's time or more is worth a warning
_EPS = 1e-3  # trace times are microseconds with nanosecond digits; nesting tolerates rounding

# Ops that exist to copy or convert: a copy under one of these is what the user asked for.
EXPLICIT_COPY_OPS = frozenset({
    "aten::clone", "aten::contiguous", "aten::copy_", "aten::to", "aten::_to_copy", "aten::type_as",
    "aten::repeat", "aten::repeat_interleave", "aten::detach_copy", "aten::lift_fresh_copy",
})
# Entry points of SDPA and its backends, as the dispatcher records them.
SDPA_BACKEND_OPS = {
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_attention_math_for_mps": "math",
    "aten::_scaled_dot_product_fused_attention_overrideable": "overrideable",
}
SDPA_OP = "aten::scaled_dot_product_attention"
SIXTEEN_BIT_TYPES = frozenset({"c10::BFloat16", "c10::Half"})  # Input type names with record_shapes


def finding(fid: str, severity: str, message: str, evidence: dict, fix: str | None, cost_us: float) -> dict:
    return {"id": fid, "severity": severity, "message": message, "evidence": evidence, "fix": fix,
            "cost_us": round(max(float(cost_us), 0.0), 3)}


def n_forwards(a: Analysis) -> int:
    return max(len(a.forwards), 1)


def per_fwd(total: float, a: Analysis) -> float:
    """A total over all forwards, as an average per forward."""
    x = round(total / n_forwards(a), 3)
    return int(x) if x.is_integer() and abs(x) >= 1024 else x  # byte counts read better as integers


def forward_time_us(a: Analysis) -> float | None:
    """What one forward takes: GPU busy time when there is a GPU, else host time (medians)."""
    if not a.forwards:
        return None
    if a.has_gpu:
        return statistics.median(f.gpu_time_us for f in a.forwards)
    return statistics.median(f.region.dur for f in a.forwards)


def severity(cost_us: float, a: Analysis) -> str:
    """warn when the cost is a noticeable share of a forward, info otherwise (no flood of warnings)."""
    total = forward_time_us(a)
    return "warn" if total and cost_us >= WARN_SHARE * total else "info"


def us(x: float | None) -> str:
    if x is None:
        return "?"
    return f"{x / 1000:.2f} ms" if x >= 1000 else f"{x:.1f} us"


def mib(n: float | None) -> str:
    return "size unknown" if n is None else (f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.1f} KiB")


def count(x: float) -> str:
    return f"{x:g}"


def aten_only(chain: Iterable[Event]) -> list[Event]:
    return [e for e in chain if e.name.startswith("aten::")]


@dataclass(frozen=True)
class OpTree:
    """Host-op nesting inside one forward: each op's parent, built in one pass per thread."""

    parent: dict[int, Event | None]
    children: dict[int, list[Event]]
    roots: list[Event]

    def chain(self, op: Event) -> list[Event]:
        """Enclosing ops of `op`, outermost first (op itself excluded)."""
        out, p = [], self.parent.get(id(op))
        while p is not None:
            out.append(p)
            p = self.parent.get(id(p))
        return out[::-1]

    def self_us(self, op: Event) -> float:
        return max(op.dur - sum(c.dur for c in self.children.get(id(op), [])), 0.0)

    def descendants(self, op: Event) -> list[Event]:
        out, todo = [], list(self.children.get(id(op), []))
        while todo:
            e = todo.pop()
            out.append(e)
            todo.extend(self.children.get(id(e), []))
        return out


_TREES: dict[int, tuple[Forward, OpTree]] = {}


def op_tree(fwd: Forward) -> OpTree:
    """The nesting of a forward's host ops, built once per forward: five rules walk it."""
    held = _TREES.get(id(fwd))
    if held is None or held[0] is not fwd:
        if len(_TREES) >= 256:  # bounded: analyses come and go, ids get reused
            _TREES.clear()
        held = _TREES[id(fwd)] = (fwd, _build_op_tree(fwd))
    return held[1]


def _build_op_tree(fwd: Forward) -> OpTree:
    parent: dict[int, Event | None] = {}
    children: dict[int, list[Event]] = defaultdict(list)
    roots: list[Event] = []
    stacks: dict[tuple, list[tuple[Event, float]]] = {}
    for op in sorted(fwd.cpu_ops, key=lambda e: (e.ts, -e.dur)):  # hot on whole-model traces: kept lean
        stack = stacks.setdefault((op.pid, op.tid), [])
        end = op.ts + op.dur
        while stack and stack[-1][1] + _EPS < end:  # the top ended before op: not its parent
            stack.pop()
        if stack:
            top = stack[-1][0]
            parent[id(op)] = top
            children[id(top)].append(op)
        else:
            parent[id(op)] = None
            roots.append(op)
        stack.append((op, end))
    return OpTree(parent, children, roots)


_CHAINS: dict[int, tuple[Analysis, dict[int, list[Event]]]] = {}


def launch_chain(a: Analysis, act: Activity) -> list[Event]:
    """The host ops that enclose the launch of a GPU activity, outermost first (cached per analysis:
    every rule asks for the same chains)."""
    if act.launch is None:
        return []
    held = _CHAINS.get(id(a))
    if held is None or held[0] is not a:
        if len(_CHAINS) >= 4:
            _CHAINS.pop(next(iter(_CHAINS)))
        held = _CHAINS[id(a)] = (a, {})
    cache = held[1]
    if id(act.launch) not in cache:
        cache[id(act.launch)] = a.index.chain(act.launch)
    return cache[id(act.launch)]


def under(chain: list[Event], op: Event) -> bool:
    return any(e is op for e in chain)


def kernels_under(a: Analysis, fwd: Forward, ops: list[Event]) -> list[Activity]:
    """GPU activities of `fwd` whose launch lies inside one of `ops` (by identity, not name)."""
    by_op = _activities_by_op(a, fwd)
    seen: set[int] = set()
    found = [act for o in ops for act in by_op.get(id(o), ()) if id(act) not in seen and not seen.add(id(act))]
    order = {id(act): i for i, act in enumerate(fwd.activities)}
    return sorted(found, key=lambda act: order[id(act)])


_UNDER: dict[int, tuple[Forward, dict[int, list[Activity]]]] = {}


def _activities_by_op(a: Analysis, fwd: Forward) -> dict[int, list[Activity]]:
    """For each host op of a forward, the GPU activities launched inside it; built once per forward."""
    held = _UNDER.get(id(fwd))
    if held is None or held[0] is not fwd:
        if len(_UNDER) >= 256:
            _UNDER.clear()
        by_op: dict[int, list[Activity]] = defaultdict(list)
        for act in fwd.activities:
            for op in launch_chain(a, act):
                by_op[id(op)].append(act)
        held = _UNDER[id(fwd)] = (fwd, by_op)
    return held[1]


ITEMSIZE = {"c10::BFloat16": 2, "c10::Half": 2, "float": 4, "double": 8, "long int": 8, "int": 4,
            "short int": 2, "bool": 1, "unsigned char": 1, "signed char": 1, "c10::complex<float>": 8}


def tensor_bytes(op: Event, arg: int = 0) -> int | None:
    """Bytes of input `arg` of a host op, from Input Dims and Input type (record_shapes); else None."""
    args = op.args
    if args is None or not args.input_dims or not args.input_type or len(args.input_dims) <= arg:
        return None
    dims, dtype = args.input_dims[arg], args.input_type[arg] if len(args.input_type) > arg else None
    if not isinstance(dims, list) or dtype not in ITEMSIZE:
        return None
    numel = 1
    for d in dims:
        if not isinstance(d, int):
            return None
        numel *= d
    return numel * ITEMSIZE[dtype]


def is_scalar(op: Event) -> bool | None:
    """Whether the first input of `op` is 0-dim; None when the trace has no shapes."""
    dims = op.args.input_dims if op.args else None
    if not dims or not isinstance(dims[0], list):
        return None
    return len(dims[0]) == 0


def works_in_16bit(a: Analysis) -> bool:
    """Any kernel of the forwards computes on or casts to a 16-bit type, or any op reads one."""
    for fwd in a.forwards:
        for act in fwd.activities:
            info = decode(act.event.name)
            if info.dtype in SIXTEEN_BIT or info.cast_to in SIXTEEN_BIT:
                return True
        if any(op.args and op.args.input_type and SIXTEEN_BIT_TYPES & set(map(str, op.args.input_type))
               for op in fwd.cpu_ops):
            return True
    return False
