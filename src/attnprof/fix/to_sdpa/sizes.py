"""A size of the scores read on a line the rewrite keeps, read from q and k instead.

GPT-2's `_attn` (transformers 2.x-4.2x) reads `nd, ns = w.size(-2), w.size(-1)` to slice its causal
buffer. The rewrite removes `w`; that line keeps its meaning when each read becomes the same size of
the product's operands. `q @ kᵀ` has q's dim -2 and kᵀ's dim -1 (matmul broadcasts only the batch
dims), so -2 is q's -2, and -1 is k's -2 when the source transposes k itself (`k.transpose(-1, -2)`,
`k.mT`, einsum's `b i d, b j d -> b i j`), k's -1 when k is already kᵀ. A proved scale (a Python
number, scale.py) keeps the shape; a mask step may broadcast it, so only reads of the scores before
any mask step are taken. Any other read (another dim, `w.shape` whole, a product by positive dims
(`k.transpose(2, 3)`), an operand that is not a plain name, or one rebound or removed between the
product and the read) is refused by the caller.
"""

from __future__ import annotations

import ast

from attnprof.fix import dataflow as flow
from attnprof.fix.to_sdpa.chain import Chain, Piece
from attnprof.fix.to_sdpa.nodes import int_literal


def from_operands(chain: Chain, use: ast.Name, binding: ast.stmt, gone: list[ast.stmt],
                  parent: dict[ast.AST, ast.AST]) -> tuple[ast.expr, str] | None:
    """(the size read `use` is part of, its text from q or k), or None where which size it is is not proved.
    `binding`: the statement whose value `use` may see; `gone`: the statements the rewrite removes."""
    read = _size_read(use, parent)
    scores = chain.scores
    stmt = _statement_in(chain.body, use, parent)
    if read is None or stmt is None or scores.positive_dims or not _before_the_masks(chain, binding, stmt):
        return None
    expr, dim, form = read
    operand, operand_dim = (scores.q, -2) if dim == -2 else (scores.k, -2 if scores.k_transposed else -1)
    if not _same_at(chain, operand, stmt, gone):
        return None
    name = operand.expr.id
    return expr, f"{name}.size({operand_dim})" if form == "size" else f"{name}.shape[{operand_dim}]"


def _size_read(use: ast.Name, parent: dict[ast.AST, ast.AST]) -> tuple[ast.expr, int, str] | None:
    """`w.size(-2)`, `w.shape[-1]`: (the whole read, its dim, 'size' or 'shape'); None for any other read."""
    up = parent.get(use)
    if not (isinstance(up, ast.Attribute) and up.value is use):
        return None
    outer = parent.get(up)
    if up.attr == "size" and isinstance(outer, ast.Call) and outer.func is up and len(outer.args) == 1 \
            and not outer.keywords:
        dim, form = int_literal(outer.args[0]), "size"
    elif up.attr == "shape" and isinstance(outer, ast.Subscript) and outer.value is up \
            and isinstance(outer.ctx, ast.Load):
        dim, form = int_literal(outer.slice), "shape"
    else:
        return None
    return (outer, dim, form) if dim in (-2, -1) else None


def _before_the_masks(chain: Chain, binding: ast.stmt, stmt: ast.stmt) -> bool:
    """`binding` is one of the scores' own statements (the product, a scale, a cast), and `stmt`, which
    reads it, comes before any mask step (`w += mask` does not rebind `w` as a plain assignment does)."""
    if not any(binding is s for s in chain.scores.steps):
        return False
    at = _index(chain.body, stmt)
    masks = [_index(chain.body, m.mask.stmt) for m in chain.scores.masks]
    return at is not None and all(m is not None and at < m for m in masks)


def _same_at(chain: Chain, operand: Piece, stmt: ast.stmt, gone: list[ast.stmt]) -> bool:
    """The operand is a name, bound by no statement the rewrite removes, and not rebound between the
    product and `stmt` (nor by `stmt` itself)."""
    if not isinstance(operand.expr, ast.Name) or _index(chain.body, operand.stmt) is None:
        return False
    name = operand.expr.id
    bound = flow.binding_before(chain.body, name, operand.stmt)
    if bound is not None and any(bound is s for s in gone):
        return False
    if flow.binds(stmt, name) or flow.binds(operand.stmt, name):
        return False
    return flow.rebound_between(chain.body, name, operand.stmt, stmt, ()) is None


def _statement_in(body: list[ast.stmt], node: ast.AST, parent: dict[ast.AST, ast.AST]) -> ast.stmt | None:
    """The statement of `body` that holds `node` directly (not inside a nested block), or None."""
    while node in parent and not isinstance(node, ast.stmt):
        node = parent[node]
    return node if _index(body, node) is not None else None


def _index(body: list[ast.stmt], stmt: ast.stmt) -> int | None:
    return next((i for i, s in enumerate(body) if s is stmt), None)
