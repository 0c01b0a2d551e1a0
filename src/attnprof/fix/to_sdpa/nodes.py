"""What one AST node is, as the chain reader asks it: a matrix product and its operands, a cast, a call of a
module's function (`torch.softmax`, `F.softmax`) rather than a tensor's method, an integer literal."""

from __future__ import annotations

import ast

from attnprof.fix import dataflow as flow

CASTS = {"float", "half", "bfloat16", "double", "to", "type_as", "type", "contiguous"}
MATMULS = {"matmul", "bmm"}


def matmul_operands(node: ast.AST) -> tuple[ast.expr, ast.expr] | None:
    if einsum_kind(node) is not None:
        return node.args[1], node.args[2]  # `einsum("b i d, b j d -> b i j", q, k)`: k untransposed
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        return node.left, node.right
    if isinstance(node, ast.Call) and flow.name_of(node.func) in MATMULS and len(node.args) == 2:
        return node.args[0], node.args[1]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MATMULS \
            and len(node.args) == 1 and not node.keywords and not _namespace(node.func.value):
        return node.func.value, node.args[0]  # `a.matmul(b)`
    return None


def _namespace(expr: ast.expr) -> bool:
    """`torch`, `torch.Tensor`: not a tensor receiver (`torch.matmul(a)` is no product of two)."""
    return isinstance(expr, ast.Name) and expr.id == "torch" or isinstance(expr, ast.Attribute) and _namespace(
        expr.value)


def uncast(expr: ast.expr) -> ast.expr:
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in CASTS:
        expr = expr.func.value
    return expr


def method(node: ast.AST | None, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name


def function(node: ast.AST | None, name: str, modules: set[str]) -> bool:
    return method(node, name) and is_module(node.func.value, modules)


def is_module(expr: ast.expr, modules: set[str]) -> bool:
    """`torch`, `F`, `nn.functional`, `torch.nn.functional`: a module, not a tensor."""
    if isinstance(expr, ast.Name):
        return expr.id in modules
    return isinstance(expr, ast.Attribute) and is_module(expr.value, modules)


def one_name(stmt: ast.Assign) -> bool:
    return len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)


def int_literal(expr: ast.expr) -> int | None:
    try:
        value = ast.literal_eval(expr)
    except ValueError:
        return None
    return value if isinstance(value, int) else None


def short(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


def einsum_kind(node: ast.AST) -> str | None:
    """"scores" for `einsum("b i d, b j d -> b i j", q, k)` (q @ kᵀ), "matmul" for
    `einsum("b i j, b j d -> b i d", p, v)` (p @ v): one batch prefix, then the two matrix letters."""
    if not (isinstance(node, ast.Call) and flow.name_of(node.func) == "einsum" and len(node.args) == 3
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return None
    spec = node.args[0].value.replace(" ", "")
    lhs, _, out = spec.partition("->")
    parts = lhs.split(",")
    if len(parts) != 2 or not out or len({len(parts[0]), len(parts[1]), len(out)}) != 1 or len(out) < 3:
        return None
    a, b = parts
    prefix = out[:-2]
    if a[:-2] != prefix or b[:-2] != prefix or "." in out:
        return None
    letters = {a[-2], a[-1], b[-2], b[-1]} - set(prefix)
    if len(letters) != 3 or out[-2] != a[-2]:
        return None
    if a[-1] == b[-1] and out[-1] == b[-2]:
        return "scores"
    if a[-1] == b[-2] and out[-1] == b[-1]:
        return "matmul"
    return None
