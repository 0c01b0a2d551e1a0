"""layout-copy: a matmul or reshape copies a non-contiguous operand into the layout it computes on.

nanoGPT splits heads with `k.view(B, T, nh, hs).transpose(1, 2)`: a strided view, free to make. But
`q @ k.transpose(-2, -1)` on 4-d operands flattens the batch dims with `reshape`, and reshape of that
view cannot be a view: matmul → reshape → clone → copy_ copies q (and `att @ v` copies v) on every
call. `y.transpose(1, 2).reshape(B, T, C)` copies the same way. A transpose of the last two dims
alone is free (bmm reads it strided). Unlike hidden-copy there is no in-place twin to switch to: the
fix is to make the layout once, or to let a kernel that reads strided inputs do the work.
"""

from __future__ import annotations

from attnprof.analysis import copies
from attnprof.analysis.attribution import Analysis
from attnprof.findings import _common as c
from attnprof.units import count, mib, us

FIX = ("lay the operand out once where it is made: `scaled_dot_product_attention(q, k, v, is_causal=True)` "
       "reads the strided q, k, v of `.view(B, T, nh, hs).transpose(1, 2)` without copying them (and "
       "fuses the rest); for a hand-written matmul, project into the head-major layout the matmul reads "
       "(one `.contiguous()` where q, k, v are made costs the same copy but only once when reused)")


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    found = [(cp, "layout") for cp in copies.copies(a) if cp.asked_by == "layout"]
    rows = copies.rows(a, found, lambda top, kind: {"op": top.name})
    if not rows:
        return []
    evidence, cost = copies.evidence(a, rows, found)
    message = _message(rows, cost, c.per_unit(a, facts))
    return [c.finding("layout-copy", c.severity(cost, a), message, evidence, FIX, cost)]


def _message(rows: list[dict], cost: float, each: str) -> str:
    r = rows[0]
    more = f"; {len(rows) - 1} more chain(s), {us(cost)} {each} in all" if len(rows) > 1 else ""
    chain = " → ".join(r["chain"][1:])
    return (f"layout copy: {r['chain'][0]} copies a non-contiguous operand into a new buffer ({chain}): "
            f"{count(r['per_forward'])} {each}, {mib(r['bytes_per_forward'], 'size unknown')}, "
            f"{us(r['time_us_per_forward'])}{more}")


RULE = c.Rule("layout-copy", scope="local", waste=True, check=check, walks_op_trees=True)
