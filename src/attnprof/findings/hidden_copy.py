"""hidden-copy: an out-of-place op that copies its input before doing its work in place.

`scores.masked_fill(mask, v)` is `clone` + `masked_fill_`: the clone is a full copy of the scores
(a `Memcpy DtoD` on a GPU) that the user never wrote, and the op's in-place twin avoids it. So a
duplicate counts only inside an op that ran its in-place twin (`masked_fill` → `masked_fill_`).
The other hidden kind is a conversion (`aten::_to_copy` inside the op: softmax(dtype=float32) on
16-bit scores). Copies a matmul or reshape makes of a non-contiguous operand are layout-copy's;
what the user asked for (`x.clone()`, `.contiguous()`, `x.to(...)`) is not hidden; SDPA math's own
upcasts are fp32-gemm's evidence. On CPU a conversion counts only when shapes prove it is not a
0-dim scalar (every `x * 0.125` converts its Python scalar).
"""

from __future__ import annotations

from attnprof.analysis import copies
from attnprof.analysis.attribution import Analysis
from attnprof.findings import _common as c
from attnprof.units import count, mib, us

HIDDEN = {"hidden": "duplicate", "conversion": "conversion"}  # the explained kinds that are hidden, as which


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    every = copies.copies(a)
    found = [(cp, k) for cp, kind in zip(every, copies.explained_kinds(a, every), strict=True)
             if (k := HIDDEN.get(kind))]
    rows = copies.rows(a, found, lambda top, kind: {
        "in_place_form": copies.in_place_form(a, top) if kind == "duplicate" else None})
    if not rows:
        return []
    evidence, cost = copies.evidence(a, rows, found)
    message = _message(rows, cost, c.per_unit(a, facts))
    return [c.finding("hidden-copy", c.severity(cost, a), message, evidence, _fix(rows), cost)]


def _message(rows: list[dict], cost: float, each: str) -> str:
    r = rows[0]
    what = "copies its input" if r["kind"] == "duplicate" else (
        f"converts its input to {r['to_dtype'] or 'another type'} in a new tensor")
    more = f"; {len(rows) - 1} more chain(s), {us(cost)} {each} in all" if len(rows) > 1 else ""
    chain = " → ".join(r["chain"][1:])
    return (f"hidden copy: {r['chain'][0]} {what} ({chain}): {count(r['per_forward'])} {each}, "
            f"{mib(r['bytes_per_forward'], 'size unknown')}, {us(r['time_us_per_forward'])}{more}")


def _fix(rows: list[dict]) -> str | None:
    ops = list(dict.fromkeys(r["in_place_form"] for r in rows[:copies.TOP] if r["in_place_form"]))
    text = [f"use the in-place form `{op.removeprefix('aten::')}` instead of {op[:-1]}: it writes into its "
            "input instead of copying it first (safe when autograd is off, e.g. under torch.no_grad(), or "
            "when the input is not needed again)" for op in ops]
    if any(r["kind"] == "conversion" for r in rows[:copies.TOP]):
        text.append("for a conversion, let a kernel that reads 16-bit inputs and accumulates in fp32 do the "
                    "work (fused attention via scaled_dot_product_attention; softmax without dtype=)")
    return "; ".join(text) or None


RULE = c.Rule("hidden-copy", scope="local", waste=True, check=check, walks_op_trees=True)
