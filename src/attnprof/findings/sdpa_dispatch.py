"""sdpa-dispatch: which backend `scaled_dot_product_attention` ran, and what it launched.

The dispatcher records the backend as an op under `aten::scaled_dot_product_attention`:
`_scaled_dot_product_cudnn_attention`, `_flash_attention`, `_efficient_attention`,
`_attention_math`, `_flash_attention_for_cpu`. Where that op is missing (a compiled graph),
the fused kernel's family names it. SDPA with no pinned backend on an H200 picks cuDNN.
"""

from __future__ import annotations

from collections import Counter

from attnprof.analysis import launches
from attnprof.analysis.attention_calls import sdpa_entries
from attnprof.analysis.attribution import Analysis, Forward
from attnprof.findings import _common as c
from attnprof.gpu import kernel_names as kn
from attnprof.units import count, us

BACKEND_OF_LIBRARY = {"pytorch_flash": "flash", "fmha_cutlassF": "efficient", "cudnn_generated": "cudnn",
                      "cudnn": "cudnn"}


def _backend_ops(fwd: Forward) -> list[str]:
    return [c.SDPA_BACKEND_OPS[op.name] for op in fwd.ops_named(*c.SDPA_BACKEND_OPS)]


def _backend_from_kernels(a: Analysis, fwd: Forward) -> list[str]:
    """Per SDPA call without a backend op: the backend its fused kernel belongs to, if any."""
    out = []
    for call in sdpa_entries(fwd):
        libs = [kn.decode(name).library for name in fwd.gpu.names_at(launches.under(a, fwd, [call]))]
        out += [BACKEND_OF_LIBRARY[lib] for lib in libs if lib in BACKEND_OF_LIBRARY][:1]
    return out


def _calls(a: Analysis) -> Counter:
    calls: Counter = Counter()
    for fwd in a.forwards:
        calls.update(_backend_ops(fwd) or _backend_from_kernels(a, fwd))
    return calls


def sdpa_backend(analysis: Analysis) -> str | None:
    """The SDPA backend the forwards ran ('cudnn', 'flash', 'efficient', 'math', ...); the most frequent
    when they differ; None when no SDPA call is in the trace or its backend cannot be told."""
    calls = _calls(analysis)
    return calls.most_common(1)[0][0] if calls else None


def _measure(a: Analysis) -> tuple[float, Counter]:
    """(time per forward of the SDPA calls, the median over the forwards: GPU time of what they launched, else
    host time; kernels)."""
    each, kernels = [], Counter()
    for fwd in a.forwards:
        sdpa = sdpa_entries(fwd)  # a compiled graph's SDPA is its backend op: what it launched is the call's
        if not a.has_gpu:
            each.append(sum(op.dur for op in sdpa))
            continue
        at = launches.under(a, fwd, sdpa)  # the activities' columns: none made
        each.append(sum(fwd.gpu.dur[at].tolist()))
        kernels.update(map(kn.short_name, fwd.gpu.names_at(at)))
    return c.median_over(each), kernels


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    calls = _calls(a)
    if not calls:
        return []
    backend = calls.most_common(1)[0][0]
    cost, kernels = _measure(a)
    n_calls = c.per_fwd(sum(calls.values()), a)
    acts = c.per_fwd(sum(kernels.values()), a)
    evidence = {"backend": backend, "calls_per_forward": n_calls,
                "by_backend": {k: c.per_fwd(v, a) for k, v in calls.items()},
                "gpu_activities_per_forward": acts if a.has_gpu else None,
                "kernels": {k: c.per_fwd(v, a) for k, v in kernels.most_common(5)},
                "time_us_per_forward": cost, "time_basis": "GPU time" if a.has_gpu else "host time"}
    mixed = f" (mixed: {dict(calls)})" if len(calls) > 1 else ""
    launched = f", {count(acts)} GPU activities" if a.has_gpu else ""
    each = c.per_unit(a, facts)
    message = (f"scaled_dot_product_attention ran the {backend} backend{mixed}: {count(n_calls)} call(s) "
               f"{each}{launched}, {us(cost)} {each}")
    fix = None
    if backend == "math":
        message += "; math is SDPA's unfused fallback (or pinned with sdpa_kernel(SDPBackend.MATH))"
        fix = ("remove a MATH pin, or find why the fused backends declined (SDPA warns with the reason "
               "when a pinned backend cannot run): flash, efficient and cuDNN run attention in one kernel")
    return [c.finding("sdpa-dispatch", "warn" if backend == "math" else "info", message, evidence, fix, cost)]


RULE = c.Rule("sdpa-dispatch", scope="local", waste=False, check=check)
