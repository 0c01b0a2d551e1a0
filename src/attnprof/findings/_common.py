"""Helpers the rules share: the rule's declaration, the finding record, per-forward arithmetic, and the
host-op queries (analysis.queries) re-exported so that a rule reaches everything through this module."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from attnprof.analysis.attribution import Analysis
from attnprof.analysis.queries import kernels_by_name as kernels_by_name
from attnprof.analysis.queries import kernels_under as kernels_under  # re-exported: rules reach all through here
from attnprof.analysis.queries import launch_chain as launch_chain
from attnprof.analysis.queries import op_tree as op_tree
from attnprof.analysis.queries import ops_named as ops_named
from attnprof.analysis.queries import per
from attnprof.gpu.kernel_names import SIXTEEN_BIT, decode
from attnprof.trace.nesting import OpTree as OpTree
from attnprof.trace.reader import Event


@dataclass(frozen=True)
class Rule:
    """A finding's metadata, declared next to its check in the rule's own file.

    scope: "local" (what one piece of code does: lint gives it a source line), "forward" (the forward
    as a whole: host pace, occupancy, launch APIs), "source" (read from the user's source, not a trace)
    or "ranks" (only several ranks' traces together show it: `check_ranks` reads their merged summary).
    waste: a cost the user can remove; the at-a-glance column shows it with its cost.
    """

    id: str
    scope: str
    waste: bool
    check: Callable[[Analysis], list[dict]] | None = None
    check_ranks: Callable[[dict], list[dict]] | None = None


WARN_SHARE = 0.05  # a cost of 5% of a forward's time or more is worth a warning

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
    """What one forward takes: GPU busy time when there is a GPU, else host time (medians); once per
    analysis, since every rule asks."""
    return per(a, "forward time", a, _forward_time_us)


def _forward_time_us(a: Analysis) -> float | None:
    if not a.forwards:
        return None
    if a.has_gpu:
        return statistics.median(f.gpu_time_us for f in a.forwards)
    return statistics.median(f.region.dur for f in a.forwards)


def severity(cost_us: float, a: Analysis) -> str:
    """warn when the cost is a noticeable share of a forward, info otherwise (no flood of warnings)."""
    total = forward_time_us(a)
    return "warn" if total and cost_us >= WARN_SHARE * total else "info"


def aten_only(chain: Iterable[Event]) -> list[Event]:
    return [e for e in chain if e.name.startswith("aten::")]


def under(chain: list[Event], op: Event) -> bool:
    return any(e is op for e in chain)


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
