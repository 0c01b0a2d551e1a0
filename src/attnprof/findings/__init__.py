"""Findings: what a trace shows about an attention implementation, each with its evidence.

Every rule is a pure function `rule(analysis) -> list[dict]` in its own module and returns at
most one finding, aggregated over the forwards (a whole model gives one `hidden-copy` listing
its top chains, not one per copy). A finding is
`{"id", "severity": "info"|"warn", "message", "evidence": {...}, "fix": str | None, "cost_us"}`,
where cost_us is the time per forward the finding stands for (GPU time on a GPU trace, host
time on a CPU trace); `run_findings` ranks by it.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from attnprof.analysis.attribution import Analysis
from attnprof.findings import (
    cpu_bound,
    fp32_gemm,
    fused_attention,
    hidden_copy,
    launch_api,
    layout_transposes,
    mask_rebuilt,
    occupancy,
    safe_softmax,
    sdpa_dispatch,
    tensor_cores,
)
from attnprof.findings.sdpa_dispatch import sdpa_backend

Rule = Callable[[Analysis], list[dict]]
RULES: dict[str, Rule] = {
    "sdpa-dispatch": sdpa_dispatch.rule,
    "fused-attention": fused_attention.rule,
    "hidden-copy": hidden_copy.rule,
    "fp32-gemm": fp32_gemm.rule,
    "mask-rebuilt": mask_rebuilt.rule,
    "safe-softmax": safe_softmax.rule,
    "layout-transposes": layout_transposes.rule,
    "tensor-cores": tensor_cores.rule,
    "occupancy": occupancy.rule,
    "launch-api": launch_api.rule,
    "cpu-bound": cpu_bound.rule,
}
_SEVERITY = {"warn": 0, "info": 1}

__all__ = ["LOCAL_RULES", "RULES", "run_findings", "sdpa_backend"]


# rules about what one piece of code does; the others describe the forward as a whole
# (host pace, occupancy, launch APIs, tensor-core use) and mean little for a single line
LOCAL_RULES = ("sdpa-dispatch", "fused-attention", "hidden-copy", "fp32-gemm", "mask-rebuilt", "safe-softmax",
               "layout-transposes")


def run_findings(analysis: Analysis, only: tuple[str, ...] | None = None) -> list[dict]:
    """Every rule's findings (or those of the rules named in `only`), the costliest first
    (ties: warnings first, then the order of RULES)."""
    if not analysis.forwards:
        return []
    with _gc_paused():
        found = [f for fid, rule in RULES.items() if only is None or fid in only for f in rule(analysis)]
    order = {fid: i for i, fid in enumerate(RULES)}
    return sorted(found, key=lambda f: (-f["cost_us"], _SEVERITY[f["severity"]], order[f["id"]]))


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The rules make tens of thousands of short-lived lists (an op tree per forward) and no reference
    cycles; the cyclic GC would walk them every 700 allocations for nothing (a tenth of their time on
    a whole-model trace). Paused while they run; whatever it would have found, it finds afterwards."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
