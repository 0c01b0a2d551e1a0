"""The scale a rewrite to SDPA passes: proved a number, applied where SDPA applies it, or refused.

SDPA computes softmax(q @ kᵀ * scale + attn_mask): the scale is one Python number, applied to the
raw scores before the mask. So a rewrite needs (1) every multiply and divide between q @ kᵀ and the
softmax to be applied before any mask step (a bias added before `/ sqrt(D)` would be scaled too);
(2) each factor to be a number: built from literals, sizes and module state only (never an
argument's values), and not a tensor at any call seen (a per-head Parameter, a learnable
temperature, a 0/1 mask multiplied in, a [1, H, 1, 1] buffer); (3) SDPA's default, 1/sqrt(E), only
where E is provably q's last dim: `q.size(-1)`, or the last size of the `view`/`reshape` q was
made by (`self.head_dim` in `x.view(B, T, H, self.head_dim).transpose(1, 2)`), never a size of a
key already transposed (`kt.size(-1)` is the key length).
"""

from __future__ import annotations

import ast

from attnprof.fix import dataflow as flow
from attnprof.fix.to_sdpa import facts as sdpa_facts
from attnprof.fix.to_sdpa.chain import Chain, Piece, Refused

NUMBER_FUNCTIONS = {"sqrt", "pow", "float", "int", "rsqrt", "log", "exp"}  # of math, or builtins
SHAPE_READS = {"size", "dim", "numel"}
KEEPS_LAST = {"contiguous", "float", "half", "bfloat16", "double", "to", "type_as", "clone", "detach"}


def scale_text(chain: Chain, text_of, state, facts, file: str, numbers=None) -> str | None:
    """scale='s text, or None where it is SDPA's default; raises Refused where it is not a proved number.
    `text_of(expr)` gives an expression's source text; `state(attr)` the one value the class gives it;
    `numbers(attr)` why `self.<attr>` may not always be a number (invariant.Family.why_not_number)."""
    scores = chain.scores
    factors = (*scores.muls, *scores.divs)
    if scores.scaled_after_mask is not None and factors:
        raise Refused(scores.scaled_after_mask, f"the scores are scaled on line {scores.scaled_after_mask} after "
                                                "the mask step: SDPA adds its mask after scaling, so the mask "
                                                "would not be scaled")
    for piece in factors:
        _check_number(piece, chain, numbers, facts is not None)
    _check_seen(factors, facts, file)
    last = last_dim_texts(chain, state)
    muls, divs = scores.muls, scores.divs
    if len(factors) == 1 and _head_dim_power(factors[0].expr, last, chain, state) == (-0.5 if muls else 0.5):
        return None
    if len(muls) == 1 and not divs:
        return text_of(muls[0].expr)
    if not factors:
        return "1.0"  # q @ kᵀ unscaled (q may be scaled before): SDPA must not scale again
    head = " * ".join(_paren(text_of, m.expr) for m in muls) or "1"
    return head + "".join(f" / {_paren(text_of, d.expr)}" for d in divs)


def _check_number(piece: Piece, chain: Chain, numbers, have_facts: bool) -> None:
    bad = _not_a_number(piece.expr, piece.stmt, chain, numbers, have_facts, 0)
    if bad is not None:
        raise Refused(piece.stmt.lineno, f"the scale `{ast.unparse(piece.expr)}` (line {piece.stmt.lineno}) is "
                                         f"not provably a number: {bad}")


def _not_a_number(expr: ast.expr, stmt: ast.stmt, chain: Chain, numbers, have_facts: bool, depth: int) -> str | None:
    """Why `expr` may not be a number fixed by literals, sizes and module state; None when it is."""
    again = lambda e, s=stmt: _not_a_number(e, s, chain, numbers, have_facts, depth + 1)  # noqa: E731
    owner = flow.self_name(chain.fn)
    if depth > 12:
        return "too deep to follow"
    if isinstance(expr, ast.Constant):
        return None if isinstance(expr.value, (int, float)) and not isinstance(expr.value, bool) else "not a number"
    if isinstance(expr, ast.UnaryOp):
        return again(expr.operand)
    if isinstance(expr, ast.BinOp):
        return again(expr.left) or again(expr.right)
    if _shape_read(expr):
        return None
    if isinstance(expr, ast.Name):
        params = {a.arg for a in ast.walk(chain.fn.args) if isinstance(a, ast.arg)}
        if expr.id in params:
            return f"`{expr.id}` is an argument"
        bound = flow.binding_before(chain.body, expr.id, stmt) if any(s is stmt for s in chain.body) else None
        if isinstance(bound, ast.Assign) and len(bound.targets) == 1 and isinstance(bound.targets[0], ast.Name):
            return again(bound.value, bound)
        if unpacked_size(bound, expr.id) is not None and _bound_once(chain.fn, expr.id):
            return None  # `_, _, _, c = q.shape`: a size
        if bound is not None or any(flow.binds(s, expr.id) for s in ast.walk(chain.fn) if isinstance(s, ast.stmt)):
            return f"`{expr.id}` is not bound once in this function"
        return None if have_facts else f"whether the global `{expr.id}` is a tensor is known only at run time"
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == owner:
        why = numbers(expr.attr) if numbers is not None else None
        if why:
            return why
        return None if have_facts else f"whether `{ast.unparse(expr)}` is a tensor is known only at run time"
    if isinstance(expr, ast.Call) and flow.name_of(expr.func) in NUMBER_FUNCTIONS and not expr.keywords:
        module = expr.func.value.id if isinstance(expr.func, ast.Attribute) and isinstance(
            expr.func.value, ast.Name) else None
        if module in (None, "math", "np", "numpy"):
            return next((why for a in expr.args if (why := again(a))), None)
    return f"`{ast.unparse(expr)[:40]}` may be a tensor or depend on an argument's values"


def _shape_read(expr: ast.expr) -> bool:
    """x.size(-1), x.shape[-1], x.size()[1], x.dim(), x.ndim: a number fixed by the shapes."""
    if isinstance(expr, ast.Subscript):
        return _shape_read(expr.value) and isinstance(expr.slice, (ast.Constant, ast.UnaryOp))
    if isinstance(expr, ast.Attribute):
        return expr.attr in ("shape", "ndim")
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in SHAPE_READS \
        and all(isinstance(a, (ast.Constant, ast.UnaryOp)) for a in expr.args)


def _check_seen(factors: tuple[Piece, ...], facts, file: str) -> None:
    """At every call seen, each multiply or divide on a scale's line had one tensor operand (the scores)."""
    for line in sorted({p.stmt.lineno for p in factors}):
        for call in sdpa_facts.at(facts, file, line, sdpa_facts.SCALE_OPS) or []:
            if sum(call["tensors"]) != 1:
                shapes = " and ".join(str(list(s)) for s in call["shapes"] if s is not None)
                raise Refused(line, f"the scale on line {line} is a tensor at run time ({shapes}): SDPA's "
                                    "scale= takes one Python number")


def last_dim_texts(chain: Chain, state) -> set[str]:
    """Texts that are q's last dim (the head dim E) wherever the call is written."""
    scores = chain.scores
    operands = [scores.q.expr] + ([scores.k.expr] if scores.k_transposed else [])
    if scores.k_transposed and "k" in chain.expansions:
        operands.append(chain.expansions["k"][1].expr)
    out = set()
    for expr in operands:
        text = ast.unparse(expr)
        out |= {f"{text}.size(-1)", f"{text}.shape[-1]"}
        made = _made_with_last(expr, scores.q.stmt, chain) if expr is scores.q.expr else None
        if made is not None and _stable(made[0], chain, state):
            out.add(made[0])
    return out


def _made_with_last(expr: ast.expr, stmt: ast.stmt, chain: Chain) -> tuple[str, int] | None:
    """(the text of the last size in the view/reshape `expr` was made by, the view's dims), through casts,
    and transposes and permutes that keep the last dim."""
    if isinstance(expr, ast.Name):
        bound = flow.binding_before(chain.body, expr.id, stmt) if any(s is stmt for s in chain.body) else None
        if isinstance(bound, ast.Assign) and len(bound.targets) == 1 and isinstance(bound.targets[0], ast.Name):
            return _made_with_last(bound.value, bound, chain)
        return None
    if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)):
        return None
    method, args, inner = expr.func.attr, expr.args, expr.func.value
    if method in ("view", "reshape") and len(args) >= 2 and not any(isinstance(a, ast.Starred) for a in args):
        last = ast.unparse(args[-1])
        return None if last == "-1" else (last, len(args))
    made = _made_with_last(inner, stmt, chain) if method in KEEPS_LAST | {"transpose", "permute"} else None
    dims = [a.value if isinstance(a, ast.Constant) and isinstance(a.value, int) else None for a in args]
    if made is None or None in dims:
        return None
    ndim = made[1]
    if method in KEEPS_LAST and not args:
        return made
    if method == "transpose" and len(dims) == 2 and all(0 <= d < ndim - 1 for d in dims):
        return made
    if method == "permute" and len(dims) == ndim and dims[-1] in (ndim - 1, -1):
        return made
    return None


def _stable(text: str, chain: Chain, state) -> bool:
    """A size text that means the same at the call: a literal, or `self.attr` the class sets once and
    the forward never sets."""
    expr = ast.parse(text, mode="eval").body
    if isinstance(expr, ast.Constant):
        return True
    owner = flow.self_name(chain.fn)
    if not (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == owner):
        return False
    targets = [t for n in ast.walk(chain.fn) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
               for t in (n.targets if isinstance(n, ast.Assign) else [n.target])]
    set_here = any(isinstance(t, ast.Attribute) and t.attr == expr.attr for t in targets)
    return not set_here and state(expr.attr) is not None


def _head_dim_power(expr: ast.expr, last: set[str], chain: Chain, state, depth: int = 0) -> float | None:
    """p where `expr` is E ** p (E = q's last dim, as written); None otherwise."""
    again = lambda e: _head_dim_power(e, last, chain, state, depth + 1)  # noqa: E731
    if depth > 8:
        return None
    if ast.unparse(expr) in last:
        return 1.0
    if isinstance(expr, ast.Name):
        bound = flow.binding_before(chain.body, expr.id, chain.final_stmt)
        one = isinstance(bound, ast.Assign) and len(bound.targets) == 1 and isinstance(bound.targets[0], ast.Name)
        if one:
            return again(bound.value)
        size = unpacked_size(bound, expr.id)
        return 1.0 if size is not None and size in last and _bound_once(chain.fn, expr.id) else None
    if isinstance(expr, ast.Call) and flow.name_of(expr.func) in ("float", "sqrt") and len(expr.args) == 1:
        inner = again(expr.args[0])
        return None if inner is None else inner / 2 if flow.name_of(expr.func) == "sqrt" else inner
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Pow) and isinstance(expr.right, (ast.Constant,
                                                                                                 ast.UnaryOp)):
        inner, power = again(expr.left), ast.literal_eval(expr.right)
        return None if inner is None or not isinstance(power, (int, float)) else inner * power
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div) and ast.unparse(expr.left) in ("1", "1.0"):
        inner = again(expr.right)
        return None if inner is None else -inner
    return None


def unpacked_size(stmt: ast.stmt | None, name: str) -> str | None:
    """`_, _, _, c = q.shape` (or `q.size()`): the text of the size `name` is, as `q.shape[-1]`; None otherwise.
    Read from the end only when the tuple has no starred part (its length is then the tensor's dims)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Tuple)):
        return None
    value, elts = stmt.value, stmt.targets[0].elts
    of = value.value if isinstance(value, ast.Attribute) and value.attr == "shape" else (
        value.func.value if isinstance(value, ast.Call) and flow.name_of(value.func) == "size" and not value.args
        and isinstance(value.func, ast.Attribute) else None)
    if of is None or any(isinstance(e, ast.Starred) for e in elts):
        return None
    at = next((i for i, e in enumerate(elts) if isinstance(e, ast.Name) and e.id == name), None)
    return None if at is None else f"{ast.unparse(of)}.shape[{at - len(elts)}]"


def _bound_once(fn: ast.AST, name: str) -> bool:
    return sum(flow.binds(s, name) for s in ast.walk(fn) if isinstance(s, ast.stmt) and not isinstance(
        s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.If, ast.For, ast.While, ast.With, ast.Try))) == 1


def _paren(text_of, expr: ast.expr) -> str:
    """The expression's text, in parentheses unless it binds tighter than * and /."""
    text = text_of(expr)
    tight = isinstance(expr, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)) or (
        isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Pow))
    return text if tight else f"({text})"
