"""Is `t = x.masked_fill(...)` safe to do in place? A conservative proof over one function's AST.

In place is safe when nothing can see the old value of `x` afterwards: `x` holds a tensor this
function made (not an argument, not a view or an alias of another tensor, not shared through a
call, a container or an attribute) and nothing reads it after the statement. What cannot be proven
is refused with the reason. Autograd, views at run time and broadcasting are checked on the running
forward by `patch.py`; this module sees only the source.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from attnprof.findings.source import func_name

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.comprehension)
# Calls whose result is always a new tensor (never their input, never a view of it).
FRESH = {
    "matmul", "bmm", "einsum", "baddbmm", "softmax", "log_softmax", "masked_fill", "where", "exp", "add",
    "mul", "div", "sub", "clone", "zeros", "ones", "empty", "full", "randn", "rand", "zeros_like",
    "ones_like", "empty_like", "full_like", "tanh", "sigmoid", "relu", "gelu", "silu", "linear", "cat",
    "stack", "scaled_dot_product_attention", "sqrt", "rsqrt", "pow", "abs", "neg",
}
# Uses of `x` that read it without keeping a reference: results are new tensors or plain values.
READS = FRESH | {"sum", "mean", "max", "min", "amax", "amin", "norm", "logsumexp", "std", "var", "any", "all",
                 "item", "tolist", "numel", "size", "dim", "isfinite", "isnan", "eq", "ne", "gt", "lt"}
METADATA = {"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad", "layout"}


@dataclass(frozen=True)
class Verdict:
    safe: bool
    reason: str


def out_of_place_fill(stmt: ast.stmt) -> tuple[ast.Call, ast.expr] | None:
    """(call, receiver) when `stmt` is `<target> = <receiver>.masked_fill(...)`."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Call)):
        return None
    func = stmt.value.func
    if isinstance(func, ast.Attribute) and func.attr == "masked_fill":
        return stmt.value, func.value
    return None


def judge(fn: ast.AST, stmt: ast.Assign) -> Verdict:
    """Whether `stmt` (`t = x.masked_fill(...)`, inside function `fn`) may become `masked_fill_`."""
    _, receiver = out_of_place_fill(stmt)
    target = stmt.targets[0]
    if not isinstance(target, ast.Name):
        return Verdict(False, f"assigns to `{ast.unparse(target)}`: other references may hold the old value")
    if not isinstance(receiver, ast.Name):
        kind = "an attribute" if isinstance(receiver, ast.Attribute) else "an expression"
        return Verdict(False, f"the masked tensor `{ast.unparse(receiver)}` is {kind}, not a local variable")
    x = receiver.id
    return (_not_shared(fn, x) or _not_in_loop(fn, stmt) or _fresh_definition(fn, stmt, x)
            or _not_read_later(fn, stmt, x, target.id) or Verdict(True, _why_safe(x, target.id)))


def _why_safe(x: str, target: str) -> str:
    later = "it is rebound here" if x == target else "it is not read again"
    return f"`{x}` is a tensor this function made, nothing else refers to it, and {later}"


def _not_shared(fn: ast.AST, x: str) -> Verdict | None:
    args = fn.args
    params = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    params += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    if x in params:
        return Verdict(False, f"`{x}` is an argument of `{fn.name}`: the caller still holds it")
    for node in ast.walk(fn):
        if isinstance(node, (ast.Global, ast.Nonlocal)) and x in node.names:
            return Verdict(False, f"`{x}` is declared global or nonlocal")
        if isinstance(node, FUNCTIONS) and node is not fn and _loads(node, x):
            return Verdict(False, f"`{x}` is used inside a nested function on line {node.lineno}")
    return None


def _not_in_loop(fn: ast.AST, stmt: ast.stmt) -> Verdict | None:
    for node in _ancestors(fn, stmt):
        if isinstance(node, LOOPS):
            return Verdict(False, f"inside a loop (line {node.lineno}): reuse across iterations unproven")
    return None


def _fresh_definition(fn: ast.AST, stmt: ast.stmt, x: str) -> Verdict | None:
    """The definitions of `x` that can reach `stmt` make new tensors, and none escapes before it."""
    defs = [s for s in _statements(fn) if _binds(s, x) and _pos(s) < _pos(stmt)]
    enclosing = {_block(fn, n) for n in [stmt, *_ancestors(fn, stmt)[:-1]]}
    chosen = None
    for s in reversed(defs):  # back to the last definition that always runs before `stmt`
        value = s.value if isinstance(s, ast.Assign) and len(s.targets) == 1 else None
        if value is None or not _is_fresh(value):
            what = ast.unparse(value) if value is not None else ast.unparse(s).splitlines()[0]
            return Verdict(False, f"`{x}` may be a view or alias of another tensor (line {s.lineno}: {what})")
        chosen = s
        if _block(fn, s) in enclosing:
            break
    if chosen is None:
        return Verdict(False, f"no definition of `{x}` in `{fn.name}` before line {stmt.lineno}")
    for name in _loads_between(fn, x, chosen, stmt):
        why = _escapes(fn, name)
        if why:
            return Verdict(False, f"`{x}` may be aliased on line {name.lineno}: {why}")
    return None


def _not_read_later(fn: ast.AST, stmt: ast.stmt, x: str, target: str) -> Verdict | None:
    if x == target:
        return None  # rebinding `x` makes every later read see the new value
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and node.id == x and isinstance(node.ctx, ast.Load) \
                and _pos(node) > _end(stmt):
            return Verdict(False, f"the unmasked `{x}` is used again on line {node.lineno} after masking")
    return None


def _is_fresh(value: ast.expr) -> bool:
    if isinstance(value, (ast.BinOp, ast.UnaryOp)):
        return True
    return isinstance(value, ast.Call) and _call_name(value) in FRESH


def _escapes(fn: ast.AST, name: ast.Name) -> str | None:
    """Why this read of `x` may keep a reference to it, or None when it only reads it."""
    parent = _parent(fn, name)
    if isinstance(parent, (ast.BinOp, ast.Compare, ast.UnaryOp)):
        return None
    if isinstance(parent, ast.Attribute) and parent.value is name:
        if parent.attr in METADATA:
            return None
        call = _parent(fn, parent)
        if isinstance(call, ast.Call) and call.func is parent:
            in_place = parent.attr.endswith("_") and isinstance(_parent(fn, call), ast.Expr)
            if parent.attr in READS or in_place:
                return None
    if isinstance(parent, ast.Call) and name in parent.args and _call_name(parent) in READS:
        return None
    return f"`{ast.unparse(parent)}`"


def _call_name(call: ast.Call) -> str | None:
    return func_name(call.func)


def _binds(stmt: ast.stmt, x: str) -> bool:
    targets = []
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
        targets = [stmt.target]
    elif isinstance(stmt, (ast.With, ast.AsyncWith)):
        targets = [i.optional_vars for i in stmt.items if i.optional_vars is not None]
    names = [n for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    walrus = [n.target for n in ast.walk(stmt) if isinstance(n, ast.NamedExpr)] if not targets else []
    return any(n.id == x for n in names + walrus)


def _loads(node: ast.AST, x: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == x for n in ast.walk(node))


def _loads_between(fn: ast.AST, x: str, first: ast.stmt, stmt: ast.stmt) -> list[ast.Name]:
    return [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == x and isinstance(n.ctx, ast.Load)
            and _end(first) < _pos(n) < _pos(stmt)]


def _statements(fn: ast.AST) -> list[ast.stmt]:
    return [n for n in ast.walk(fn) if isinstance(n, ast.stmt) and n is not fn]


def _parents(fn: ast.AST) -> dict[int, ast.AST]:
    cached = getattr(fn, "_attnprof_parents", None)
    if cached is None:
        cached = {id(c): p for p in ast.walk(fn) for c in ast.iter_child_nodes(p)}
        fn._attnprof_parents = cached
    return cached


def _parent(fn: ast.AST, node: ast.AST) -> ast.AST | None:
    return _parents(fn).get(id(node))


def _block(fn: ast.AST, node: ast.AST) -> tuple[int, str]:
    """(parent, field) of the statement list holding `node`: `if` body and `else` are different blocks."""
    parent = _parent(fn, node)
    field = next(f for f, v in ast.iter_fields(parent) if isinstance(v, list) and any(n is node for n in v))
    return id(parent), field


def _ancestors(fn: ast.AST, node: ast.AST) -> list[ast.AST]:
    out, p = [], _parent(fn, node)
    while p is not None and p is not fn:
        out.append(p)
        p = _parent(fn, p)
    return out + [fn]


def _pos(node: ast.AST) -> tuple[int, int]:
    return node.lineno, node.col_offset


def _end(node: ast.AST) -> tuple[int, int]:
    return node.end_lineno, node.end_col_offset
