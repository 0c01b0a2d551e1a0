"""layout-transposes: `aten::transpose` ops per forward, and which op inserted them.

The flash and efficient SDPA backends work on [B, S, H, D]: their wrappers transpose the
[B, H, S, D] query, key and value in and the output back (4 per call). cuDNN takes [B, H, S, D]
directly and shows none. A transpose is a view (no kernel, no copy): it moves no data, unless a
later op has to make it contiguous (hidden-copy reports that, with that copy's time). So it is
charged its device time, none, and never outranks compute; its host time (the median per forward)
is stated apart: in a profiled trace it is mostly the profiler's own overhead per op (a linear
layer's `aten::t` alone is a transpose and an as_strided, each recorded).
"""

from __future__ import annotations

from collections import Counter

from attnprof.analysis.attribution import Analysis
from attnprof.findings import _common as c
from attnprof.units import count, us

TRANSPOSE = "aten::transpose"
REORDERING_BACKENDS = ("aten::_scaled_dot_product_flash_attention",
                       "aten::_scaled_dot_product_efficient_attention",
                       "aten::_scaled_dot_product_flash_attention_for_cpu")


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    by_parent: Counter = Counter()
    host_us = [0.0] * len(a.forwards)
    kernels = 0
    for i, fwd in enumerate(a.forwards):
        at = fwd.positions_named(TRANSPOSE)  # by position and columns: no event made
        if not at:
            continue
        up = c.op_tree(a, fwd).parent_positions(at)
        named = iter(fwd.names_at([i for i in up if i >= 0]))
        by_parent.update(next(named) if i >= 0 else "(forward)" for i in up)
        spans = c.op_columns(a, fwd, at)
        host_us[i] = sum(spans.dur.tolist())
        kernels += len(c.under_spans(a, fwd, spans).every()) if a.has_gpu else 0
    if not by_parent:
        return []
    per = {k: c.per_fwd(v, a) for k, v in by_parent.most_common()}
    total, host = c.per_fwd(sum(by_parent.values()), a), c.median_over(host_us)
    evidence = {"per_forward": total, "by_enclosing_op": per, "host_time_us_per_forward": host,
                "kernels_per_forward": c.per_fwd(kernels, a) if a.has_gpu else None}
    parts = ", ".join(f"{count(n)} in {op}" for op, n in per.items())
    views = "views, no GPU work" if a.has_gpu and not kernels else "views"
    message = (f"{count(total)} {TRANSPOSE} {c.per_unit(a, facts)} ({parts}): {views}, no data moved; "
               f"{us(host)} of host time, mostly the profiler's own overhead per recorded op")
    backends = [op for op in per if op in REORDERING_BACKENDS]
    if backends:
        message += (f"; {', '.join(backends)} reorders [B, H, S, D] to the [B, S, H, D] its kernel reads "
                    "(cuDNN takes [B, H, S, D] directly)")
    return [c.finding("layout-transposes", "info", message, evidence, None, 0.0)]  # a view's device time: none


RULE = c.Rule("layout-transposes", scope="local", waste=False, check=check, walks_op_trees=True)
