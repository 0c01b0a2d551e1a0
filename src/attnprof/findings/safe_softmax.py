"""safe-softmax: `aten::_safe_softmax` and the extra passes it makes over the scores.

SDPA's math backend calls `_safe_softmax`: a plain softmax, then `isneginf` + `all` (is every
score of the row -inf?) and `where` to write 0 for such rows. What it buys: a row whose keys are
all masked gives zeros instead of NaN (softmax of all -inf is 0/0). What it costs: extra passes
over the [B, H, S, S] scores, measured as the kernels (GPU) or host time (CPU) of its children
other than the softmax itself.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from attnprof.analysis.attribution import Analysis
from attnprof.findings import _common as c
from attnprof.gpu import kernel_names as kn
from attnprof.units import count, us

SAFE = "aten::_safe_softmax"
SOFTMAX = ("aten::softmax", "aten::_softmax")


def _collect(a: Analysis) -> tuple[int, Counter, dict[str, list[float]], list[float], list[float]]:
    """(calls, extra ops, extra kernels by name over all forwards; extra time, softmax time in each forward)."""
    calls, ops, kernels = 0, Counter(), defaultdict(list)
    extras_us, softmaxes_us = [], []
    for fwd in a.forwards:
        extra_us = softmax_us = 0.0
        safe = fwd.ops_named(SAFE)
        tree = c.op_tree(a, fwd) if safe else None
        for op in safe:
            calls += 1
            kids = tree.children(op)
            extras = [k for k in kids if k.name not in SOFTMAX]
            soft = [k for k in kids if k.name in SOFTMAX]
            ops.update(k.name for k in extras)
            if not a.has_gpu:
                extra_us += sum(k.dur for k in extras)
                softmax_us += sum(k.dur for k in soft)
                continue
            for x in c.kernels_under(a, fwd, extras):
                kernels[kn.short_name(x.event.name)].append(x.event.dur)
                extra_us += x.event.dur
            softmax_us += sum(x.event.dur for x in c.kernels_under(a, fwd, soft))
        extras_us.append(extra_us)
        softmaxes_us.append(softmax_us)
    return calls, ops, kernels, extras_us, softmaxes_us


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    calls, ops, kernels, extras_us, softmaxes_us = _collect(a)
    if not calls:
        return []
    extra, soft = c.median_over(extras_us), c.median_over(softmaxes_us)
    rows = [{"kernel": k, "per_forward": c.per_fwd(len(d), a), "time_us_per_forward": c.per_fwd(sum(d), a)}
            for k, d in sorted(kernels.items(), key=lambda kv: -sum(kv[1]))]
    evidence = {"calls_per_forward": c.per_fwd(calls, a),
                "extra_ops": {k: c.per_fwd(v, a) for k, v in ops.items()}, "extra_kernels": rows,
                "extra_time_us_per_forward": extra, "softmax_time_us_per_forward": soft,
                "buys": "rows whose scores are all -inf (fully masked) give 0 instead of NaN",
                "time_basis": "GPU time of the kernels" if a.has_gpu else "host time of the ops"}
    names = ", ".join(ops)
    n = sum(r["per_forward"] for r in rows)
    what = f"{count(n)} extra kernel(s) ({names})" if a.has_gpu else f"extra ops ({names})"
    message = (f"{SAFE} adds {what} to the softmax: {us(extra)} {c.per_unit(a, facts)} next to {us(soft)} for "
               f"the softmax itself; it buys zeros instead of NaN for fully masked rows")
    fix = ("a fused SDPA backend (flash, efficient, cuDNN) computes the softmax inside its kernel with no "
           "extra passes over the scores; the check only matters when a row can have every key masked")
    return [c.finding("safe-softmax", c.severity(extra, a), message, evidence, fix, extra)]


RULE = c.Rule("safe-softmax", scope="local", waste=True, check=check, walks_op_trees=True)
