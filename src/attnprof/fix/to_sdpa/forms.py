"""The shapes real attention code gives the steps of a chain, read from the source: a mask added only
when given (`if attention_mask is not None: w = w + attention_mask`, `maybe_add_mask(w, m)` defined in
the file), `scores += bias`, `self.softmax = nn.Softmax(dim=-1)`, a bare `softmax` imported from
torch.nn.functional; and, for what SDPA cannot express, the step that blocks it (a soft-cap, a helper
that rewrites the scores, weights returned to the caller), so a refusal names the real blocker.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass

from attnprof.fix import dataflow as flow
from attnprof.fix.to_sdpa import nodes

FUNCTIONAL = "torch.nn.functional"


@dataclass(frozen=True)
class Known:
    """What the file defines that a chain may call: `self.<attr>` softmax modules (attr -> dim) and
    helpers that add a mask only when it is given (name -> (scores param, mask param, line of the add))."""

    softmaxes: dict[str, int | None]
    helpers: dict[str, tuple[str, str, int]]
    imports: dict[str, str]

    @classmethod
    def of(cls, tree: ast.Module | None, fn: ast.AST) -> Known:
        if tree is None:
            return cls({}, {}, {})
        owner = next((c for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and fn in c.body), None)
        return cls(_softmax_modules(owner) if owner else {}, _add_helpers(tree), flow.module_names(tree))

    def bare_softmax(self, func: ast.expr) -> bool:
        """`softmax(x, dim=-1)` with `softmax` imported from torch.nn.functional (or torch)."""
        return isinstance(func, ast.Name) and self.imports.get(func.id) in (f"{FUNCTIONAL}.softmax",
                                                                             "torch.softmax")


def _softmax_modules(cls: ast.ClassDef) -> dict[str, int | None]:
    """`self.softmax = nn.Softmax(dim=-1)`, assigned once in the class: {attr: dim}."""
    found: dict[str, list[int | None]] = {}
    for node in ast.walk(cls):
        for target in node.targets if isinstance(node, ast.Assign) else []:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                value = node.value
                is_softmax = isinstance(value, ast.Call) and flow.name_of(value.func) == "Softmax"
                found.setdefault(target.attr, []).append(_dim_of(value) if is_softmax else "other")
    return {attr: dims[0] for attr, dims in found.items() if len(dims) == 1 and dims[0] != "other"}


def _dim_of(call: ast.Call) -> int | None:
    given = [k.value for k in call.keywords if k.arg == "dim"] or call.args[:1]
    if not given:
        return None
    try:
        value = ast.literal_eval(given[0])
    except ValueError:
        return None
    return value if isinstance(value, int) else None


def _add_helpers(tree: ast.Module) -> dict[str, tuple[str, str, int]]:
    """Top-level `def f(scores, mask=None): return scores if mask is None else scores + mask` (timm's
    maybe_add_mask), in either order of the conditional."""
    out = {}
    for fn in tree.body:
        if not (isinstance(fn, ast.FunctionDef) and len(fn.body) == 1 and isinstance(fn.body[0], ast.Return)
                and len(fn.args.args) == 2 and all(_transparent(d) for d in fn.decorator_list)):
            continue
        scores, mask = (a.arg for a in fn.args.args)
        value = fn.body[0].value
        if isinstance(value, ast.IfExp) and _none_test(value.test, mask) is not None:
            plain, added = (value.body, value.orelse) if _none_test(value.test, mask) else (value.orelse, value.body)
            if _is_name(plain, scores) and _sum_of(added, scores, mask):
                out[fn.name] = (scores, mask, added.lineno)
    return out


def _transparent(decorator: ast.expr) -> bool:
    """`@torch.fx.wrap` and timm's `@register_notrace_function`: they register the function for tracing and
    return it unchanged (timm/layers/_fx.py), so its body is what runs."""
    return ast.unparse(decorator) in ("torch.fx.wrap", "register_notrace_function")


def _none_test(test: ast.expr, name: str) -> bool | None:
    """True for `name is None`, False for `name is not None`, None for anything else."""
    return _none_test_expr(test) if isinstance(test, ast.Compare) and _is_name(test.left, name) else None


def _is_name(expr: ast.AST, name: str) -> bool:
    return isinstance(expr, ast.Name) and expr.id == name


def _sum_of(expr: ast.expr, a: str, b: str) -> bool:
    return isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add) and {
        getattr(expr.left, "id", None), getattr(expr.right, "id", None)} == {a, b}


@dataclass(frozen=True)
class ConditionalAdd:
    """`if m is not None: [x = ...;] s = s + M` as one additive mask: `M if m is not None else None`."""

    add: ast.stmt  # the statement that adds
    scores: ast.Name  # the scores before the add
    mask: ast.expr  # attn_mask's expression (names bound inside the `if` inlined)
    index: int  # which operand of the add is the mask


def conditional_add(block: ast.If, name: str, fn: ast.AST, body: list[ast.stmt]) -> ConditionalAdd | None:
    """The `if` read as a mask added only when given, or None when it is something else."""
    if block.orelse or not isinstance(block.test, ast.Compare):
        return None
    tested = block.test.left
    if not (isinstance(tested, (ast.Name, ast.Attribute)) and _none_test_expr(block.test) is False):
        return None
    *before, last = block.body
    found = added(last, name)
    if found is None:
        return None
    scores, mask, index = found
    for stmt in reversed(before):  # `causal_mask = attention_mask[..., :n]` used by the add only
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            return None
        bound = stmt.targets[0].id
        outside = [u for u in flow.loads_after(fn, body, block, bound)]
        if outside or bound == name:
            return None
        mask = _inline(mask, bound, stmt.value)
    text_same = ast.unparse(mask) == ast.unparse(tested)
    expr = mask if text_same else ast.IfExp(copy.deepcopy(block.test), mask, ast.Constant(None))
    ast.copy_location(expr, block)
    expr.end_lineno, expr.end_col_offset = block.end_lineno, block.end_col_offset
    return ConditionalAdd(last, scores, expr, index)


ONLY_ADDED = "attnprof rewrites a mask under an `if` only when it is added (`if m is not None: s = s + m`)"


def conditional_blocker(block: ast.If, name: str) -> str:
    """Why the `if` that changes the scores `name` is not a mask added only when given: a fill under it
    (annotated-transformer's `if mask is not None: scores = scores.masked_fill(mask == 0, -1e9)`) said as
    such, with what a finite value would change; else the one conditional form that is rewritten."""
    fills = (n for n in ast.walk(block.body[-1]) if nodes.method(n, "masked_fill") or nodes.method(n, "masked_fill_"))
    fill = next(fills, None)
    if fill is None or len(fill.args) != 2:
        return ONLY_ADDED
    value = _shown(fill.args[1])
    if _finite(fill.args[1]):
        return (f"a fill with the finite value {value} under the `if`: a row whose every key is masked gets uniform "
                "weights from it where a boolean mask gives none, and a mask passed in may mask a whole row "
                f"(padding); {ONLY_ADDED}")
    return f"a fill with {value} under the `if`: {ONLY_ADDED}"


def _shown(value: ast.expr) -> str:
    """A fill value as written in a message: `-1e+09` for the parsed -1e9, else the expression."""
    number = value.operand if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub) else value
    if isinstance(number, ast.Constant) and isinstance(number.value, float):
        return f"{-number.value if number is not value else number.value:g}"
    return ast.unparse(value)


def _finite(value: ast.expr) -> bool:
    """A number written out (`-1e9`, `-10000.0`) or a dtype's extreme (`torch.finfo(x.dtype).min`)."""
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub):
        value = value.operand
    if isinstance(value, ast.Constant):
        return isinstance(value.value, (int, float)) and abs(value.value) != float("inf")
    return isinstance(value, ast.Attribute) and value.attr in ("min", "max") and "finfo" in ast.unparse(value)


def _none_test_expr(test: ast.Compare) -> bool | None:
    if len(test.ops) == 1 and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None:
        return True if isinstance(test.ops[0], ast.Is) else False if isinstance(test.ops[0], ast.IsNot) else None
    return None


def added(stmt: ast.stmt, name: str) -> tuple[ast.Name, ast.expr, int] | None:
    """`name = name + M`, `name = M + name` or `name += M`: (the scores read, M, M's operand index)."""
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add) and _is_name(stmt.target, name):
        return ast.Name(name, ast.Load(), lineno=stmt.lineno, col_offset=stmt.col_offset), stmt.value, 1
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and _is_name(stmt.targets[0], name) \
            and isinstance(stmt.value, ast.BinOp) and isinstance(stmt.value.op, ast.Add):
        left, right = stmt.value.left, stmt.value.right
        if _is_name(left, name):
            return left, right, 1
        if _is_name(right, name):
            return right, left, 0
    return None


def _inline(expr: ast.expr, name: str, value: ast.expr) -> ast.expr:
    class Swap(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            return copy.deepcopy(value) if node.id == name else node

    return Swap().visit(copy.deepcopy(expr))


def blocker(expr: ast.AST) -> str | None:
    """The real reason a step between the scores and softmax has no SDPA equivalent, when it is one of
    the known ones."""
    calls = {flow.name_of(n.func) for n in ast.walk(expr) if isinstance(n, ast.Call)}
    if "tanh" in calls:
        return "soft-capping (tanh of the scores, as Gemma-2): SDPA has no soft-cap (flex_attention's score_mod has)"
    helper = next((n for n in ast.walk(expr) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)), None)
    if helper is not None:
        return (f"the scores go through the helper `{helper.func.id}(...)`, which attnprof does not read as a "
                "mask: what it adds, and whether it depends on the scores, is not shown in this function")
    return None


def _passed_on(value: ast.expr, use: ast.Name, parent: dict[ast.AST, ast.AST]) -> bool:
    """`qk.detach()`, `(out, probs) if output_attentions else (out,)`: the value bound is `use` itself,
    through argument-less methods and the tuples, lists and conditionals it is packed in."""
    node = use
    while node is not value:
        up = parent.get(node)
        method = isinstance(up, ast.Attribute) and isinstance(parent.get(up), ast.Call) and not parent[up].args
        if method:
            node = parent[up]
        elif isinstance(up, (ast.Tuple, ast.List, ast.Starred)) or isinstance(up, ast.IfExp) and up.test is not node:
            node = up
        else:
            return False
    return True


def returned(uses: list[ast.Name], fn: ast.AST) -> int | None:
    """The line where a use reaches the caller: a `return` of the name (or of the name a use binds, as
    `qk = qk.detach()` then `return out, qk`), or a store on the module (`self.attn_map = attn`)."""
    parent = flow.parents(fn)
    for use in uses:
        stmt = use
        while stmt in parent and not isinstance(stmt, ast.stmt):
            stmt = parent[stmt]
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Attribute) for t in stmt.targets):
            return stmt.lineno
        if isinstance(stmt, ast.Return):
            return stmt.lineno
        passed_on = isinstance(stmt, ast.Assign) and _passed_on(stmt.value, use, parent)
        names = {t.id for t in stmt.targets if isinstance(t, ast.Name)} if passed_on else set()
        for node in flow.own_nodes(fn):
            if isinstance(node, ast.Return) and node.value is not None and flow.start(node) >= flow.start(use) \
                    and names & flow.names_read(node.value):
                return node.lineno
    return None


def softmax_input(node: ast.AST, modules: set[str], known: Known) -> tuple[ast.expr, int | None] | None:
    """(input, dim) of a softmax call: F.softmax(x, dim), x.softmax(dim), nn.Softmax(dim=d)(x),
    `self.softmax(x)` (a Softmax module the class assigns once), `softmax(x, dim)` imported from F."""
    if not isinstance(node, ast.Call):
        return None
    if isinstance(node.func, ast.Call) and flow.name_of(node.func.func) == "Softmax" and len(node.args) == 1:
        return node.args[0], _dim(node.func.args, node.func.keywords, 0)
    func = node.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self" \
            and func.attr in known.softmaxes and len(node.args) == 1 and not node.keywords:
        return node.args[0], known.softmaxes[func.attr]
    if known.bare_softmax(func) and node.args:
        return node.args[0], _dim(node.args, node.keywords, 1)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        return None  # `self.softmax(x)`: a module or method the class does not assign once as nn.Softmax
    if flow.name_of(node.func) != "softmax" or not isinstance(node.func, ast.Attribute):
        return None
    if nodes.is_module(node.func.value, modules):
        return (node.args[0], _dim(node.args, node.keywords, 1)) if node.args else None
    return node.func.value, _dim(node.args, node.keywords, 0)


def _dim(args: list, keywords: list, at: int) -> int | None:
    dims = [k.value for k in keywords if k.arg == "dim"] or args[at:at + 1]
    return nodes.int_literal(dims[0]) if dims else None


def dropout_p(call: ast.AST, node: ast.expr, modules: set[str]) -> tuple[str, bool] | None:
    """(dropout_p's text, is a module call) when `call` is a dropout of `node`."""
    if not (isinstance(call, ast.Call) and call.args and call.args[0] is node):
        return None
    kw = {k.arg: k.value for k in call.keywords}
    if nodes.function(call, "dropout", modules):
        p = kw.get("p", call.args[1] if len(call.args) > 1 else None)
        training = kw.get("training", kw.get("train", call.args[2] if len(call.args) > 2 else None))
        p_text = ast.unparse(p) if p is not None else "0.5"
        return (p_text if training is None else f"{p_text} if {ast.unparse(training)} else 0.0"), False
    func = call.func
    if isinstance(func, ast.Attribute) and "drop" in func.attr.lower() and len(call.args) == 1 and not kw:
        module = ast.unparse(func)  # its own flag: a model in eval with its dropouts in train (MC dropout) drops
        return f"{module}.p if {module}.training else 0.0", True
    return None
