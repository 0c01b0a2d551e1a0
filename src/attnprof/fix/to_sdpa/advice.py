"""lint's advice for hand-written attention: the call `rewrite --to-sdpa` would write there (the module's
own q, k, v, mask and scale arguments), or why no SDPA call is equivalent. Never a generic
`is_causal=True`: a mask the source does not prove causal (a key padding mask, T5's relative bias, an
encoder's none) is not causal, and advice followed literally must not change the model."""

from __future__ import annotations

import ast

from attnprof.errors import UserError
from attnprof.fix.target import Target
from attnprof.fix.to_sdpa.plan import LIBRARY, Rewrite, plan

GENERIC = ("one F.scaled_dot_product_attention call with this chain's own mask and scale (is_causal=True only "
           "where the mask is provably top-left causal): `attnprof rewrite --to-sdpa` writes it or says why not")


def advise(findings: list[dict], target: Target, grad: bool = False) -> list[dict]:
    """`findings` with each hand-written-attention finding's fix made the plan's word for its function."""
    wanted = [f for f in findings if f["id"] == "hand-written-attention" and f.get("line")]
    if not wanted:
        return findings
    try:
        planned = plan(target, grad)
    except UserError:
        planned = []
    return [f | {"fix": _fix(f, planned)} if f in wanted else f for f in findings]


def _fix(finding: dict, planned: list[Rewrite]) -> str:
    span = _function_span(finding["file"], finding["line"])
    mine = [r for r in planned if r.file == finding["file"] and span and span[0] <= r.line <= span[1]]
    if not mine:
        return GENERIC
    r = mine[0]
    if r.reason == LIBRARY:
        return r.reason
    if r.safe:
        return f"{r.call}: what `attnprof rewrite --to-sdpa` writes here ({r.reason})" if r.reason else \
            f"{r.call}: what `attnprof rewrite --to-sdpa` writes here"
    return f"no single SDPA call is equivalent as written: {r.reason} (line {r.line})"


def _function_span(file: str, line: int) -> tuple[int, int] | None:
    """The first and last line of the innermost function around `line`."""
    from attnprof.findings.source import parse

    tree = parse(file)
    if tree is None:
        return None
    around = [f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
              and f.lineno <= line <= f.end_lineno]
    inner = min(around, key=lambda f: f.end_lineno - f.lineno, default=None)
    return (inner.lineno, inner.end_lineno) if inner else None
