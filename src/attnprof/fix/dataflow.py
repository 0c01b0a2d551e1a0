"""Which binding of a name each read sees, within one function's AST: what a source rewrite must know
before it moves an expression or deletes a statement.

Conservative by construction: a read anywhere after a binding, up to the next plain assignment of the
name in the same block, counts as a read of it (a branch, a nested function, a later block too).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
LOOPS = (ast.For, ast.AsyncFor, ast.While)
METADATA = {"shape", "dtype", "device", "ndim"}
LIKE = {"type_as", "expand_as", "view_as"}  # methods that read only the metadata of their argument
# Calls that only read their inputs and make a new value: a statement of them can be dropped unused.
PURE = {"tril", "triu", "ones", "zeros", "full", "ones_like", "zeros_like", "full_like", "arange", "view",
        "reshape", "bool", "to", "float", "int", "size", "dim", "eq", "ne", "logical_not", "unsqueeze",
        "expand", "type_as", "finfo", "tensor", "sqrt", "byte", "long", "contiguous", "detach", "len"}


def own_nodes(fn: ast.AST) -> Iterator[ast.AST]:
    """Nodes of `fn` without the bodies of functions defined inside it."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        if isinstance(node, FUNCTIONS):
            continue
        yield node
        todo.extend(ast.iter_child_nodes(node))


def end(node: ast.AST) -> tuple[int, int]:
    return node.end_lineno, node.end_col_offset


def start(node: ast.AST) -> tuple[int, int]:
    return node.lineno, node.col_offset


def parents(fn: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(fn) for child in ast.iter_child_nodes(node)}


def name_of(func: ast.AST) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def self_name(fn: ast.AST) -> str | None:
    """The first parameter of a method (`self`), if the function has one named so."""
    args = getattr(fn, "args", None)
    first = (args.posonlyargs + args.args)[:1] if args else []
    return first[0].arg if first and first[0].arg == "self" else None


def block_of(fn: ast.AST, stmt: ast.stmt) -> list[ast.stmt] | None:
    """The statement list of `fn` that holds `stmt` directly."""
    for node in ast.walk(fn):
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list) and any(s is stmt for s in block):
                return block
    return None


def in_loop(fn: ast.AST, stmt: ast.stmt) -> bool:
    return any(isinstance(n, LOOPS) and n is not stmt and start(n) <= start(stmt) and end(stmt) <= end(n)
               for n in own_nodes(fn))


def binds(stmt: ast.stmt, name: str) -> bool:
    """Whether running `stmt` may rebind `name` (an assignment, a loop target, an import, a with ... as)."""
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, (ast.Store, ast.Del)):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (a.asname or a.name.split(".")[0]) == name for a in node.names):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
    return False


def binding_before(body: list[ast.stmt], name: str, stmt: ast.stmt) -> ast.stmt | None:
    """The last statement of `body` before `stmt` that binds `name`."""
    index = next(i for i, s in enumerate(body) if s is stmt)
    return next((s for s in reversed(body[:index]) if binds(s, name)), None)


def _plain_assign(stmt: ast.stmt, name: str) -> bool:
    return (isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)
            or isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name
            and stmt.value is not None)


def loads_after(fn: ast.AST, body: list[ast.stmt], binding: ast.stmt, name: str) -> list[ast.Name]:
    """Reads of `name` that may see the value `binding` gave it."""
    index = next(i for i, s in enumerate(body) if s is binding)
    kill = next((s for s in body[index + 1:] if _plain_assign(s, name)), None)
    out = []
    for node in ast.walk(fn):
        reads = isinstance(node, ast.Name) and node.id == name and (
            isinstance(node.ctx, ast.Load) or isinstance(node.ctx, ast.Store) and _aug_target(fn, node))
        if reads and start(node) > end(binding) and (kill is None or start(node) < end(kill)):
            out.append(node)
    return sorted(out, key=start)


def _aug_target(fn: ast.AST, name: ast.Name) -> bool:
    return any(isinstance(n, ast.AugAssign) and n.target is name for n in ast.walk(fn))


def size_read(name: ast.Name, parent: dict[ast.AST, ast.AST]) -> bool:
    """`x.shape`, `x.size(-1)`, `x.dtype`: a read of metadata, not of the values."""
    up = parent.get(name)
    if isinstance(up, ast.Call) and up.args == [name] and isinstance(up.func, ast.Attribute) and up.func.attr in LIKE:
        return True  # `x.type_as(scores)`: scores' dtype, not its values
    if not (isinstance(up, ast.Attribute) and up.value is name):
        return False
    return up.attr in METADATA or up.attr in ("size", "dim") and isinstance(parent.get(up), ast.Call)


def names_read(expr: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(expr) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def rebound_between(body: list[ast.stmt], name: str, first: ast.stmt, last: ast.stmt,
                    skip: Iterable[ast.stmt]) -> ast.stmt | None:
    """A statement strictly between `first` and `last` in `body` (not in `skip`) that rebinds `name`."""
    ids = [id(s) for s in body]
    lo, hi = ids.index(id(first)), ids.index(id(last))
    skipped = {id(s) for s in skip}
    return next((s for s in body[lo + 1:hi] if id(s) not in skipped and binds(s, name)), None)


def pure(stmt: ast.stmt) -> bool:
    """A plain assignment of names from calls that only compute a value (torch factories, sizes, views)."""
    if not (isinstance(stmt, ast.Assign) and all(_names_only(t) for t in stmt.targets)):
        return False
    for node in ast.walk(stmt.value):
        if isinstance(node, ast.Call) and name_of(node.func) not in PURE:
            return False
        if isinstance(node, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom, *FUNCTIONS)):
            return False
    return True


def _names_only(target: ast.expr) -> bool:
    if isinstance(target, (ast.Tuple, ast.List)):
        return all(_names_only(t) for t in target.elts)
    return isinstance(target, ast.Name)


def bound_names(stmt: ast.Assign) -> list[str]:
    return [n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def made_dead(fn: ast.AST, body: list[ast.stmt], removed: list[ast.stmt], replaced: ast.AST,
              kept: list[ast.AST]) -> list[ast.stmt]:
    """Statements of `body` whose every read was inside `removed` statements or in `replaced`, outside
    the `kept` expressions (which the new call carries over): the rewrite makes them dead. Pure ones
    only, to a fixed point; a statement that was dead before the rewrite is the user's, and stays."""
    gone = list(removed)
    changed = True
    while changed:
        changed = False
        for stmt in body:
            if any(s is stmt for s in gone) or not pure(stmt):
                continue
            reads = [u for name in bound_names(stmt) for u in loads_after(fn, body, stmt, name)]
            if reads and all((_inside_any(u, gone) or _inside_any(u, [replaced])) and not _inside_any(u, kept)
                             for u in reads):
                gone.append(stmt)
                changed = True
    return [s for s in gone if not any(s is r for r in removed)]


def _inside_any(node: ast.AST, roots: list[ast.AST]) -> bool:
    return any(start(r) <= start(node) and end(node) <= end(r) for r in roots)


def module_names(tree: ast.Module) -> dict[str, str]:
    """{name: module} for each module the file binds by import (`F` -> torch.nn.functional)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out
