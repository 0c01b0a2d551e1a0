"""Which rewrite a `rewrite` call or `attnprof.patch` runs: in-place masked_fills (fix/inplace) or
hand-written attention to one SDPA call (fix/to_sdpa). Each wing has the same four steps under the same
names: `plan` (what the source and the running forward prove), `checked` (the plan against the original,
fix.checked), `verify` (profiled before and after) and `runtime` (the rewrite on a module object); this
module only picks the wing.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType
from typing import Any

from attnprof.fix import edits
from attnprof.fix.target import Target
from attnprof.fix.verify import checked_first


def _wing(to_sdpa: bool, step: str) -> ModuleType:
    """A step's module of the wing: fix.to_sdpa.<step> or fix.inplace.<step>."""
    return import_module(f"attnprof.fix.{'to_sdpa' if to_sdpa else 'inplace'}.{step}")


def plan(spec: str, loaded: Target, device: str, grad: bool, to_sdpa: bool, strict: bool = False) -> dict:
    """The checked plan of `loaded` (the target `spec`, on `device`), as `attnprof.api.rewrite` returns it;
    `strict` refuses a rewrite to SDPA that loses autograd the original supports."""
    planned = _wing(to_sdpa, "plan").plan(loaded, grad)
    edits_made, sources, checked = _wing(to_sdpa, "checked").checked(spec, planned, device, strict)
    return {"plan": edits_made, "checked": checked, "sources": sources, "diff": edits.unified_diff(sources),
            "target": spec, "device": device, "grad": grad, "to_sdpa": to_sdpa}


def verify_plan(rewritten: dict) -> dict:
    """Profile a plan's target before and after (a to-SDPA plan whose attention lives in an installed package
    verifies the configured switch instead). Any difference is one UserError (checked_first)."""
    spec, sources, device, grad = (rewritten[k] for k in ("target", "sources", "device", "grad"))
    wing = _wing(rewritten["to_sdpa"], "verify")
    return checked_first(lambda: wing.verify(spec, sources, device, grad, rewritten["plan"]))


def patch(module: Any, compile: bool = False, to_sdpa: bool = False, inputs: tuple | dict | None = None,
          strict: bool = False) -> Any:
    """A GraphModule of `module` with safe masked_fills in place; `.attnprof_rewrites` names them.

    `compile=True` captures the graphs with torch.compile instead of torch.fx.symbolic_trace: it
    follows Python that needs real values (shapes as ints, slicing by them) and splits the graph at
    data-dependent branches. The rewrites then happen at the first call, per captured graph.

    `to_sdpa=True` rewrites hand-written attention to one scaled_dot_product_attention call instead
    (what `attnprof patch --to-sdpa` writes), on `module` itself: each method with a chain is
    recompiled from its rewritten source and bound to the instances. With `inputs` (the forward's
    arguments) the proof uses the calls they make (a mask equal to the causal mask at run time);
    without, only what the source proves is rewritten. With `inputs` each rewrite is also checked against
    the original (fix.differential, in float64, under torch.no_grad() too) and `.attnprof_verdict` says
    what was checked; `strict=True` refuses a rewrite that loses autograd the original supports (double
    backward, forward-mode AD). A transformers model is switched to attn_implementation="sdpa" instead of
    edited. An attnprof.errors.PatchError says what cannot be rewritten and what to do instead.
    """
    if to_sdpa:
        return _wing(True, "runtime").patch_module(module, inputs, strict)
    return _wing(False, "runtime").patch_graph(module, compile)
