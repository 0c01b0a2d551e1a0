"""Helpers the rules share: the rule's declaration, the finding record, per-forward arithmetic, and the
host-op queries (analysis.queries) re-exported so that a rule reaches everything through this module."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from attnprof.analysis.attribution import Analysis
from attnprof.analysis.attribution import all_gpu as all_gpu
from attnprof.analysis.columns import distinct
from attnprof.analysis.kernel_summary import KERNELS_LISTED
from attnprof.analysis.launches import kernels_under as kernels_under  # re-exported: rules reach all through here
from attnprof.analysis.launches import launch_chain as launch_chain
from attnprof.analysis.launches import ops_named as ops_named
from attnprof.analysis.launches import under_spans as under_spans
from attnprof.analysis.nesting import OpTree as OpTree
from attnprof.analysis.ops import EXPLICIT_COPY_OPS as EXPLICIT_COPY_OPS  # re-exported: rules reach all here
from attnprof.analysis.ops import SDPA_BACKEND_OPS as SDPA_BACKEND_OPS
from attnprof.analysis.ops import SDPA_OP as SDPA_OP
from attnprof.analysis.ops import aten_only as aten_only
from attnprof.analysis.ops import is_scalar as is_scalar
from attnprof.analysis.ops import tensor_bytes as tensor_bytes
from attnprof.analysis.phases import unit
from attnprof.analysis.queries import each_forward as each_forward
from attnprof.analysis.queries import gpu_named as gpu_named
from attnprof.analysis.queries import kernel_bits as kernel_bits
from attnprof.analysis.queries import kernels_by_name as kernels_by_name
from attnprof.analysis.queries import kernels_named as kernels_named
from attnprof.analysis.queries import median_over as median_over
from attnprof.analysis.queries import n_forwards as n_forwards
from attnprof.analysis.queries import op_columns as op_columns
from attnprof.analysis.queries import op_tree as op_tree
from attnprof.analysis.queries import per, reads_input_of
from attnprof.analysis.queries import per_fwd as per_fwd
from attnprof.analysis.rows import take as take
from attnprof.findings.run_facts import BARE as BARE  # re-exported: every check's default
from attnprof.findings.run_facts import RunFacts as RunFacts
from attnprof.gpu.kernel_names import SIXTEEN_BIT, decode
from attnprof.trace.reader import Event


@dataclass(frozen=True)
class Rule:
    """A finding's metadata, declared next to its check in the rule's own file.

    `check(analysis, facts)` returns the rule's final findings (at most one, aggregated over the regions):
    `facts` (findings.run_facts.RunFacts) is what a run knows beyond its trace, BARE for a bare trace, and the
    rule decides its cost, severity and words from both; nothing changes a finding after it. A finding's
    `cost_us` is the time per forward (per step, for a training step) it stands for, GPU time on a GPU
    trace, host time on a CPU trace: 0.0 for an informational finding that names no removable time, which
    reports show without a cost. The list is ranked once, where run_findings makes it.

    scope: "local" (what one piece of code does: lint gives it a source line), "forward" (the forward
    as a whole: host pace, occupancy, launch APIs), "source" (read from the user's source, not a trace)
    or "ranks" (only several ranks' traces together show it: `check_ranks` reads their merged summary).
    waste: a cost the user can remove; the at-a-glance column shows it with its cost.
    walks_op_trees: the check walks the forwards' op trees (directly, or through launch chains, copies,
    attention calls): such rules run first, so that the trees, the largest thing the rules keep, are gone
    before the others build theirs.
    """

    id: str
    scope: str
    waste: bool
    check: Callable[[Analysis, RunFacts], list[dict]] | None = None
    check_ranks: Callable[[dict], list[dict]] | None = None
    walks_op_trees: bool = False


# A finding's evidence that lists one entry per distinct kernel or API name keeps at most this many, in the
# order the rule documents (most time or most launches first), and sums up the rest in one `..._not_listed`
# entry; the entries left out are never made. The kernel table's bound: a trace that names kernels by kind
# has tens to hundreds (every fixture's evidence lists at most 4), only a name per launch goes past it.
EVIDENCE_LISTED = KERNELS_LISTED

WARN_SHARE = 0.05  # a cost of 5% of a forward's time or more is worth a warning

SIXTEEN_BIT_TYPES = frozenset({"c10::BFloat16", "c10::Half"})  # Input type names with record_shapes


def finding(fid: str, severity: str, message: str, evidence: dict, fix: str | None, cost_us: float) -> dict:
    return {"id": fid, "severity": severity, "message": message, "evidence": evidence, "fix": fix,
            "cost_us": round(max(float(cost_us), 0.0), 3)}


def bounded(order: list[int], launches: list[int], totals: list[float], a: Analysis) -> tuple[list[int], dict | None]:
    """(the entries an evidence list keeps: the first EVIDENCE_LISTED of `order`; the summary of the others, or
    None when it keeps all), entry k having made `launches[k]` launches of `totals[k]` us in all."""
    listed, rest = order[:EVIDENCE_LISTED], order[EVIDENCE_LISTED:]
    if not rest:
        return listed, None
    return listed, not_listed(len(rest), sum(launches[k] for k in rest), sum(totals[k] for k in rest), a)


def not_listed(distinct: int, launches: int, time_us: float | None, a: Analysis) -> dict:
    """The summary of an evidence list's entries past EVIDENCE_LISTED: how many, their launches and (where the
    list has times) their time, per forward."""
    rest = {"distinct": distinct, "per_forward": per_fwd(launches, a)}
    return rest if time_us is None else {**rest, "time_us_per_forward": per_fwd(time_us, a)}


def run_unit(a: Analysis, facts: RunFacts) -> str:
    """"forward" or "step": the unit the run says its region is, else what the trace shows."""
    return facts.unit or unit(a)


def per_unit(a: Analysis, facts: RunFacts) -> str:
    return f"per {run_unit(a, facts)}"


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


def under(chain: list[Event], op: Event) -> bool:
    return any(e is op for e in chain)


def works_in_16bit(a: Analysis) -> bool:
    """Any kernel of the forwards computes on or casts to a 16-bit type, or any op reads one; once per
    analysis. The ops first, then the kernels' names until one is 16-bit: each name tested decodes it, and a
    trace of unique names has tens of thousands."""
    return per(a, "works in 16-bit", a, _works_in_16bit)


def _works_in_16bit(a: Analysis) -> bool:
    if any(reads_input_of(a, fwd, SIXTEEN_BIT_TYPES) for fwd in a.forwards):
        return True
    return any(_sixteen_bit(fwd.gpu.names[code]) for fwd in a.forwards for code in distinct(fwd.gpu.name).tolist())


def _sixteen_bit(name: str) -> bool:
    info = decode(name)
    return info.dtype in SIXTEEN_BIT or info.cast_to in SIXTEEN_BIT
