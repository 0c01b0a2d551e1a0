"""Whether module state a rewrite relies on (a causal buffer, a scale, a dropout module) is what its one
definition says, for every instance and every call: read in the whole file, not only in the method.

A fact read from `self.<attr>` holds only if the attribute gets one value in one place and nothing
changes it afterwards. Looked at: the class, its bases in the file and every subclass in the file
(a subclass re-registering the buffer, a `set_bidirectional()` method doing `self.bias.fill_(1)`),
for item assignment (`self.bias[..., :p] = 1`), in-place methods and functions (`fill_`, `copy_`,
`zero_`, `masked_fill_`, `nn.init.ones_(self.bias)`), augmented assignment, a second assignment or
`register_buffer`, and aliases (`m = self.bias; m.fill_(1)`); in the rest of the file, `setattr` or
`delattr` of that name on anything, and `x.<attr>` assigned or changed in place from outside.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from attnprof.fix import dataflow as flow

DEFINES = {"register_buffer", "register_parameter", "register_module", "add_module"}


@dataclass(frozen=True)
class Break:
    """The first line that can change the attribute, and what it does there."""

    line: int
    what: str

    def why(self, attr: str) -> str:
        return f"`self.{attr}` is {self.what} on line {self.line}"


class Family:
    """The classes of one file an instance of `cls` runs code from: `cls`, its bases and its subclasses."""

    def __init__(self, tree: ast.Module, cls: ast.ClassDef | None):
        self.tree = tree
        classes = {c.name: c for c in ast.walk(tree) if isinstance(c, ast.ClassDef)}
        self.members: list[ast.ClassDef] = []
        if cls is not None:
            self.members = [cls, *_ancestors(cls, classes), *_descendants(cls, classes)]

    def definitions(self, attr: str) -> list[tuple[ast.expr, int, ast.stmt]]:
        """(value, line, statement) of each `self.<attr> = v` and `register_buffer("<attr>", v)` in the family."""
        out = []
        for stmt in self._nodes():
            if not isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Expr)):
                continue
            out += [(stmt.value, stmt.lineno, stmt) for target in _targets(stmt) if _self_attr(target, attr)]
            out += [(call.args[1], stmt.lineno, stmt) for call in ast.walk(stmt) if isinstance(call, ast.Call)
                    and flow.name_of(call.func) in DEFINES and len(call.args) >= 2 and _constant(call.args[0]) == attr]
        return sorted(out, key=lambda d: d[1])

    def one_value(self, attr: str) -> tuple[ast.expr | None, ast.stmt | None, Break | None]:
        """The attribute's one value and the statement giving it, or the first line that breaks it."""
        found = self.definitions(attr)
        if len(found) > 1:
            return None, None, Break(found[1][1], "set a second time")
        broken = self.changed(attr)
        if broken is not None or not found:
            return None, None, broken
        return found[0][0], found[0][2], None

    def why_not_number(self, attr: str) -> str | None:
        """Why `self.<attr>` (a scale) may not be a Python number on some call: a definition that may make a
        tensor (`nn.Parameter`, `torch.tensor(...)`, a method of a tensor), or a change anywhere in the file;
        None when every definition is arithmetic on numbers, names and sizes (or there is none here)."""
        for value, line, _ in self.definitions(attr):
            calls = [n for n in ast.walk(value) if isinstance(n, ast.Call)
                     and not (isinstance(n.func, ast.Name) and n.func.id in ("float", "int", "abs", "round", "len"))
                     and not (isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
                              and n.func.value.id == "math")]
            if calls:
                return (f"`self.{attr}` is set to `{ast.unparse(value)[:50]}` on line {line}, which may be a tensor: "
                        "SDPA's scale= takes one Python number")
        broken = self.changed(attr)
        return broken.why(attr) + ": it may not stay a number" if broken else None

    def function_of(self, stmt: ast.stmt) -> tuple[ast.AST, list[ast.stmt]] | None:
        """The method of the family holding `stmt`, and the block it sits in."""
        for cls in self.members:
            for fn in _functions(cls):
                block = flow.block_of(fn, stmt)
                if block is not None:
                    return fn, block
        return None

    def changed(self, attr: str) -> Break | None:
        """The first line that changes `self.<attr>` after it is made, in the family or elsewhere in the file."""
        breaks = [b for cls in self.members for fn in _functions(cls) if (b := _changed_in(fn, attr, "self"))]
        inside = {id(n) for cls in self.members for n in ast.walk(cls)}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and flow.name_of(node.func) in ("setattr", "delattr") \
                    and len(node.args) >= 2 and _constant(node.args[1]) == attr:
                breaks.append(Break(node.lineno, f"set by `{ast.unparse(node)[:60]}`"))
            elif id(node) not in inside and (b := _outside_change(node, attr)):
                breaks.append(b)
        return min(breaks, key=lambda b: b.line) if breaks else None

    def why_not_dropout(self, called: ast.expr, modules: set[str]) -> str | None:
        """Why `self.<attr>` may not be an nn.Dropout whose `.p` and `.training` SDPA can take; None when every
        definition in the family builds one (both branches of a conditional too) and nothing rebinds it."""
        if not _self_attr(called, getattr(called, "attr", "")):
            return f"`{ast.unparse(called)}` is not a module attribute attnprof can follow to an nn.Dropout"
        attr = called.attr
        found = self.definitions(attr)
        if not found:
            return f"`self.{attr}` is not built in this file: whether it is an nn.Dropout is not shown"
        for value, line, _ in found:
            other = next((b for b in _branches(value) if not _dropout_call(b, modules)), None)
            if other is not None:
                return (f"`self.{attr}` may be `{ast.unparse(other)[:50]}` (line {line}), not an nn.Dropout: "
                        "SDPA's dropout_p needs the dropout module's own p and training flag")
        broken = self.changed(attr)
        return broken.why(attr) + ": it may not stay an nn.Dropout" if broken else None

    def _nodes(self):
        for cls in self.members:
            yield from ast.walk(cls)


def _branches(value: ast.expr) -> list[ast.expr]:
    """Every value a conditional expression may give."""
    if isinstance(value, ast.IfExp):
        return [*_branches(value.body), *_branches(value.orelse)]
    return [value]


def _dropout_call(expr: ast.expr, modules: set[str]) -> bool:
    """`nn.Dropout(p)`, `torch.nn.Dropout(p)`, or `Dropout(p)` imported from torch.nn."""
    if not (isinstance(expr, ast.Call) and flow.name_of(expr.func) == "Dropout"):
        return False
    if isinstance(expr.func, ast.Name):
        return expr.func.id in modules
    root = expr.func.value
    while isinstance(root, ast.Attribute):
        root = root.value
    return isinstance(root, ast.Name) and root.id in modules


def _ancestors(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> list[ast.ClassDef]:
    out, todo = [], [b.id for b in cls.bases if isinstance(b, ast.Name)]
    while todo:
        found = classes.get(todo.pop())
        if found is not None and found not in out and found is not cls:
            out.append(found)
            todo += [b.id for b in found.bases if isinstance(b, ast.Name)]
    return out


def _descendants(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> list[ast.ClassDef]:
    out, names = [], {cls.name}
    changed = True
    while changed:
        changed = False
        for c in classes.values():
            if c is not cls and c not in out and any(flow.name_of(b) in names for b in c.bases):
                out.append(c)
                names.add(c.name)
                changed = True
    return out


def _functions(cls: ast.ClassDef) -> list[ast.AST]:
    return [n for n in ast.walk(cls) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return [e for t in node.targets for e in _flat(t)]
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target] if getattr(node, "value", None) is not None else []
    return []


def _flat(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [e for t in target.elts for e in _flat(t)]
    return [target]


def _constant(expr: ast.expr) -> object:
    return expr.value if isinstance(expr, ast.Constant) else None


def _self_attr(node: ast.AST, attr: str, owner: str = "self") -> bool:
    return isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.value, ast.Name) \
        and node.value.id == owner


def _root(expr: ast.AST) -> ast.AST:
    """What a subscript, an attribute (`.data`, `.T`) or a method call (`.view(...)`) is taken of."""
    while True:
        if isinstance(expr, (ast.Subscript, ast.Starred)):
            expr = expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            expr = expr.func.value
        elif isinstance(expr, ast.Attribute) and not (isinstance(expr.value, ast.Name)):
            if expr.attr in ("data", "T", "mT", "real"):
                expr = expr.value
            else:
                return expr
        else:
            return expr


def _in_place(call: ast.Call) -> list[ast.AST]:
    """The tensors a call may change in place: the receiver of `x.fill_()`, the arguments of a function
    ending in `_` (`nn.init.ones_(x)`), an `out=` argument."""
    name = flow.name_of(call.func) or ""
    out = [k.value for k in call.keywords if k.arg == "out"]
    if name.endswith("_") and not name.startswith("__"):
        if isinstance(call.func, ast.Attribute) and not _is_namespace(call.func.value):
            out.append(call.func.value)
        else:
            out += call.args[:1]
    return out


def _is_namespace(expr: ast.expr) -> bool:
    """`torch`, `nn.init`, `torch.nn.init`: a module a function is called from (lower-case names)."""
    return isinstance(expr, ast.Name) and expr.id in ("torch", "nn", "init", "F") or (
        isinstance(expr, ast.Attribute) and expr.attr in ("init", "nn", "functional") and _is_namespace(expr.value))


def _changed_in(fn: ast.AST, attr: str, owner: str, names: set[str] = frozenset()) -> Break | None:
    """The first change of `owner.<attr>` (or a name aliasing it, or one of `names`) inside one function."""
    aliases = set(names) | {t.id for n in ast.walk(fn) if isinstance(n, ast.Assign)
                            and _rooted(n.value, attr, owner, set(names)) for t in n.targets if isinstance(t, ast.Name)}
    for node in sorted((n for n in ast.walk(fn) if hasattr(n, "lineno")), key=flow.start):
        for target in _targets(node):
            definition = _self_attr(target, attr, owner) and not isinstance(node, ast.AugAssign)
            aug_alias = isinstance(node, ast.AugAssign) and isinstance(target, ast.Name) and target.id in aliases
            rooted = not isinstance(target, ast.Name) and not definition and _rooted(target, attr, owner, aliases)
            if aug_alias or rooted:
                return Break(node.lineno, f"changed by `{ast.unparse(node)[:60]}`")
        if isinstance(node, ast.Call) and any(_rooted(t, attr, owner, aliases) for t in _in_place(node)):
            return Break(node.lineno, f"changed in place by `{ast.unparse(node)[:60]}`")
    return None


def name_changed(fn: ast.AST, name: str) -> Break | None:
    """The first in-place change of the local tensor `name` in `fn` (`mask.fill_(1)` under a flag too)."""
    return _changed_in(fn, "", "", {name})


def _rooted(expr: ast.AST, attr: str, owner: str, aliases: set[str]) -> bool:
    root = _root(expr)
    return _self_attr(root, attr, owner) or isinstance(root, ast.Name) and root.id in aliases \
        or bool(attr) and _by_name(expr, attr)


def _by_name(expr: ast.AST, attr: str) -> bool:
    """`getattr(self, "bias")`, `self._buffers["bias"]`, `self.__dict__["bias"]` somewhere in `expr`'s chain."""
    while True:
        if isinstance(expr, ast.Call) and flow.name_of(expr.func) == "getattr" and len(expr.args) >= 2:
            return _constant(expr.args[1]) == attr
        if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Attribute) \
                and expr.value.attr in ("_buffers", "_parameters", "_modules", "__dict__"):
            return _constant(expr.slice) == attr
        if isinstance(expr, (ast.Subscript, ast.Attribute)):
            expr = expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            expr = expr.func.value
        else:
            return False


def _cropped(node: ast.AST, target: ast.expr) -> bool:
    """`x.a = x.a[:n, :n]`: the attribute rebound to a top-left crop of itself."""
    value = getattr(node, "value", None)
    if not (isinstance(node, ast.Assign) and isinstance(value, ast.Subscript)
            and ast.unparse(value.value) == ast.unparse(target)):
        return False
    parts = value.slice.elts if isinstance(value.slice, ast.Tuple) else [value.slice]
    return all(isinstance(p, ast.Slice) and p.lower is None and p.step is None for p in parts)


def _outside_change(node: ast.AST, attr: str) -> Break | None:
    """`model.attn.bias = ...`, `model.attn.bias[...] = 1`, `blk.attn.bias.fill_(1)` outside the family."""
    for target in _targets(node):
        root = _root(target)
        if _cropped(node, target):
            continue  # nanoGPT's crop_block_size: `a.bias = a.bias[:, :, :n, :n]`, a tril cropped stays a tril
        if isinstance(root, ast.Attribute) and root.attr == attr and not _self_attr(root, attr):
            return Break(node.lineno, f"changed from outside its class by `{ast.unparse(node)[:60]}`")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.endswith("_") \
            and not node.func.attr.startswith("__"):
        root = _root(node.func.value)
        if isinstance(root, ast.Attribute) and root.attr == attr and not _self_attr(root, attr):
            return Break(node.lineno, f"changed in place from outside its class by `{ast.unparse(node)[:60]}`")
    return None
