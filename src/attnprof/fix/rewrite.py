"""Which rewrite a `rewrite` call plans and how its plan is verified: in-place masked_fills (fix/inplace) or
hand-written attention to one SDPA call (fix/to_sdpa). Both plan, check against the original in a copy, and
verify by profiling before and after; this module only picks the wing."""

from __future__ import annotations

from attnprof.fix import edits
from attnprof.fix.target import Target
from attnprof.fix.verify import checked_first, verify


def plan(spec: str, loaded: Target, device: str, grad: bool, to_sdpa: bool, strict: bool = False) -> dict:
    """The checked plan of `loaded` (the target `spec`, on `device`), as `attnprof.api.rewrite` returns it;
    `strict` refuses a rewrite to SDPA that loses autograd the original supports."""
    if to_sdpa:
        from attnprof.fix.to_sdpa import checked as sdpa_checked
        from attnprof.fix.to_sdpa import rewrite as sdpa

        edits_made, sources, checked = sdpa_checked.checked(spec, sdpa.plan(loaded, grad), device, strict)
    else:
        from attnprof.fix.inplace import source as inplace

        edits_made, sources, checked = inplace.checked(spec, inplace.plan(loaded, grad), device)
    return {"plan": edits_made, "checked": checked, "sources": sources, "diff": edits.unified_diff(sources),
            "target": spec, "device": device, "grad": grad, "to_sdpa": to_sdpa}


def verify_plan(rewritten: dict) -> dict:
    """Profile a plan's target before and after; a to-SDPA plan whose attention lives in an installed package
    verifies the configured switch instead. Any difference is one UserError (checked_first)."""
    spec, sources, device, grad = (rewritten[k] for k in ("target", "sources", "device", "grad"))
    if not rewritten["to_sdpa"]:
        return checked_first(lambda: verify(spec, sources, device, grad))
    from attnprof.fix.to_sdpa import rewrite as sdpa
    from attnprof.fix.to_sdpa import verify as sdpa_verify

    if not sources and any(r.reason == sdpa.LIBRARY for r in rewritten["plan"]):
        return checked_first(lambda: sdpa_verify.verify_configured(spec, device, grad))
    return checked_first(lambda: sdpa_verify.verify_rewrite(spec, sources, device, grad))
