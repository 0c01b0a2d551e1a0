"""What an attention mask means, proved from the source: is_causal=True, attn_mask=..., or a refusal
with the reason.

is_causal=True is SDPA's top-left causal mask (query i sees keys 0..i, whatever the two lengths).
Only a mask the source proves to be that is written as is_causal: one made by `tril`/`triu` of ones
(or of -inf, for a float mask), through names, `register_buffer` in `__init__`, top-left slices
(`[:, :, :T, :S]`), casts, views, `== 0` and `~`. A mask that merely equals the causal mask at the
calls seen is evidence about those calls: GPT-2's `bias[:, :, s-t:s, :s]` is bottom-right, equal to
the top-left one only while t == s, and off by far with a KV cache. Such a mask goes to attn_mask=
as written (right for every length), or the rewrite is refused.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from attnprof.fix import dataflow as flow
from attnprof.fix.to_sdpa import facts as sdpa_facts
from attnprof.fix.to_sdpa import invariant
from attnprof.fix.to_sdpa.chain import Chain, MaskStep, Refused
from attnprof.fix.to_sdpa.nodes import int_literal

TRIL, ABOVE, ADDITIVE = "tril", "strictly above the diagonal", "additive causal"
# masks that never empty a row (True = attend), and their negations (True = masked): a tril of ones
# sliced at any rows keeps column 0; a band (a sliding window) sliced square keeps its diagonal
ROWS, ROWS_OUT, BAND, BAND_OUT = "keeps column 0", "masks column 0 in no row", "band", "outside a band"
FLIP = {TRIL: ABOVE, ABOVE: TRIL, ROWS: ROWS_OUT, ROWS_OUT: ROWS, BAND: BAND_OUT, BAND_OUT: BAND}
KEEPS_A_KEY = {False: {TRIL, ROWS, BAND}, True: {ABOVE, ROWS_OUT, BAND_OUT}}  # by masked_when_true
SLICED = {TRIL: ROWS, ABOVE: ROWS_OUT, ROWS: ROWS, ROWS_OUT: ROWS_OUT}
VIEWS = {"bool", "to", "float", "int", "byte", "long", "half", "view", "reshape", "unsqueeze", "expand",
         "contiguous", "detach", "type_as", "clone"}
ONES = {"ones", "ones_like"}


@dataclass(frozen=True)
class MaskUse:
    causal: bool
    text: str | None  # attn_mask's source text when not causal
    reason: str
    causal_at_calls_seen: bool = False  # causal where it ran, not provably elsewhere


class Context:
    """Where names in a mask come from: the function's own assignments and the module state the class
    gives it once, unchanged anywhere in the file (invariant); `broken` collects why a fact did not hold."""

    def __init__(self, chain: Chain, cls: ast.ClassDef | None, modules: set[str], tree: ast.Module | None = None):
        self.chain, self.cls, self.modules = chain, cls, modules
        self.parent = flow.parents(chain.fn)
        self.owner = flow.self_name(chain.fn)
        self.family = invariant.Family(tree if tree is not None else ast.Module([], []), cls)
        self.broken: list[str] = []

    def local(self, name: str, stmt: ast.stmt | None) -> ast.Assign | None:
        """The assignment `name` has at `stmt`: in the chain's function, or in the method of the class that
        set module state (`mask = torch.triu(mask, 1)` before `register_buffer("mask", mask)`)."""
        if stmt is None:
            return None
        inside = any(s is stmt for s in self.chain.body)
        where = (self.chain.fn, self.chain.body) if inside else self.family.function_of(stmt)
        if where is None:
            return None
        found = flow.binding_before(where[1], name, stmt)
        if not isinstance(found, ast.Assign):
            return None
        changed = invariant.name_changed(where[0], name)
        if changed is not None:
            self.broken.append(f"`{name}` is {changed.what} on line {changed.line}")
            return None
        return found

    def state(self, attr: str) -> ast.expr | None:
        """The one value the class gives `self.<attr>`, if it has one and nothing in the file changes it."""
        return self.state_at(attr)[0]

    def state_at(self, attr: str) -> tuple[ast.expr | None, ast.stmt | None]:
        value, stmt, broken = self.family.one_value(attr)
        if broken is not None:
            self.broken.append(broken.why(attr))
        return value, stmt


def pattern(expr: ast.expr, stmt: ast.stmt, ctx: Context, depth: int = 0) -> str | None:
    """TRIL (non-zero on and below the diagonal), ABOVE (only above it), ADDITIVE (-inf above, 0 elsewhere)."""
    if depth > 12:
        return None
    again = lambda e, s=stmt: pattern(e, s, ctx, depth + 1)  # noqa: E731
    if isinstance(expr, ast.Name):
        bound = ctx.local(expr.id, stmt)
        return again(bound.value, bound) if bound is not None and len(bound.targets) == 1 else None
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == ctx.owner:
        value, where = ctx.state_at(expr.attr)
        return again(value, where) if value is not None else None
    if isinstance(expr, ast.Subscript):
        inner = again(expr.value)
        if _top_left(expr.slice):
            return inner if inner not in (BAND, BAND_OUT) or _square(expr.slice) else None
        return SLICED.get(inner) if _columns_from_zero(expr.slice) else None
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.Invert, ast.Not)):
        return FLIP.get(again(expr.operand))
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1 and _is_zero(expr.comparators[0]):
        inner = again(expr.left)
        return FLIP.get(inner) if isinstance(expr.ops[0], ast.Eq) else inner if isinstance(
            expr.ops[0], (ast.NotEq, ast.Gt)) else None
    if not isinstance(expr, ast.Call):
        return None
    name, method = flow.name_of(expr.func), isinstance(expr.func, ast.Attribute)
    receiver_is_tensor = method and not _module(expr.func.value, ctx.modules)
    if name in VIEWS and receiver_is_tensor:
        return again(expr.func.value)
    if name == "logical_not" and receiver_is_tensor:
        return FLIP.get(again(expr.func.value))
    if name in ("tril", "triu"):
        operand, rest = (expr.func.value, expr.args) if receiver_is_tensor else (expr.args[0], expr.args[1:])
        diagonal = _diagonal(rest, expr.keywords)
        base = _base(operand, stmt, ctx)
        if name == "tril" and diagonal == 0 and base == "ones":
            return TRIL
        if name == "triu" and diagonal == 1:
            return {"ones": ABOVE, "-inf": ADDITIVE}.get(base)
        if name == "triu" and diagonal is not None and diagonal <= 0 and again(operand) == TRIL:
            return BAND
    return None


def _base(expr: ast.expr, stmt: ast.stmt | None, ctx: Context) -> str | None:
    """'ones' for a tensor of ones, '-inf' for a tensor full of -inf, through local names."""
    if isinstance(expr, ast.Name) and stmt is not None:
        bound = ctx.local(expr.id, stmt)
        return _base(bound.value, bound, ctx) if bound is not None else None
    if not isinstance(expr, ast.Call):
        return None
    name = flow.name_of(expr.func)
    if name in VIEWS and isinstance(expr.func, ast.Attribute) and not _module(expr.func.value, ctx.modules):
        return _base(expr.func.value, stmt, ctx)
    if name in ONES:
        return "ones"
    if name in ("full", "full_like"):
        fill = [k.value for k in expr.keywords if k.arg == "fill_value"] or expr.args[1:2]
        return "-inf" if fill and very_negative(fill[0]) else None
    return None


def very_negative(expr: ast.expr) -> bool:
    """-inf or the dtype's minimum, as written: `float("-inf")`, `-math.inf`, `torch.finfo(t).min`."""
    text = ast.unparse(expr).replace(" ", "").replace("'", '"')
    return text in {'float("-inf")', '-float("inf")', "-math.inf", "-torch.inf", "-np.inf", "-numpy.inf",
                    "float(\"-Inf\")"} or text.endswith(".min") and "finfo(" in text


def _top_left(index: ast.expr) -> bool:
    """`[:T, :T]`, `[:, :, :T, :T]`: every slice starts at 0 with step 1."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    return all(isinstance(p, ast.Slice) and p.lower is None and p.step is None for p in parts)


def _square(index: ast.expr) -> bool:
    """`[..., :T, :T]`: the last two slices end at the same, as written."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    ends = [ast.unparse(p.upper) if isinstance(p, ast.Slice) and p.upper is not None else None for p in parts[-2:]]
    return len(ends) == 2 and ends[0] is not None and ends[0] == ends[1]


def _columns_from_zero(index: ast.expr) -> bool:
    """Every part a slice of step 1, the last one from 0 (`[:, :, s - t:s, :s]`): whichever dim the last
    part falls on, the columns kept start at 0."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    if not all(isinstance(p, ast.Slice) and p.step is None for p in parts):
        return False
    return parts[-1].lower is None or _is_zero(parts[-1].lower)


def minus_inf(expr: ast.expr) -> bool:
    """-inf as written (not the dtype's minimum, which is finite)."""
    return very_negative(expr) and "finfo" not in ast.unparse(expr)


def _is_zero(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Constant) and expr.value == 0 and not isinstance(expr.value, bool)


def _diagonal(args: list, keywords: list) -> int | None:
    given = [k.value for k in keywords if k.arg == "diagonal"] or args[:1]
    if not given:
        return 0
    return int_literal(given[0])  # `-2` is a UnaryOp, not a Constant


def _module(expr: ast.expr, modules: set[str]) -> bool:
    if isinstance(expr, ast.Name):
        return expr.id in modules
    return isinstance(expr, ast.Attribute) and _module(expr.value, modules)


def decide_all(steps: tuple[MaskStep, ...], ctx: Context, facts: sdpa_facts.Facts | None, file: str) -> MaskUse:
    """One mask step as `decide` reads it; two as one float mask where they are a bias added and a boolean
    mask filled (ALiBi plus a causal mask): `bias.masked_fill(masked, -inf)`, which SDPA adds."""
    if len(steps) == 1:
        return decide(steps[0], ctx, facts, file)
    bias = [s for s in steps if s.kind == "add"]
    fill = [s for s in steps if s.kind != "add"]
    if len(steps) != 2 or len(bias) != 1 or isinstance(bias[0].mask.expr, ast.IfExp):
        raise Refused(steps[1].line, "two mask steps that are not a bias plus one boolean mask: combine them into "
                                     "one mask first")
    use = decide(fill[0], ctx, facts, file)  # the fill proved as for one step (a finite one keeps a key per row)
    _check_fill(bias[0], sdpa_facts.at(facts, file, bias[0].line, sdpa_facts.ADD_OPS), False, ctx)
    text = f"{_atom(bias[0].mask.expr)}.masked_fill({_masked_text(fill[0])}, float(\"-inf\"))"
    return MaskUse(False, text, f"attn_mask=: the bias added on line {bias[0].line} and the mask on line "
                                f"{fill[0].line} as one float mask (-inf where masked); {use.reason}")


def _atom(expr: ast.expr) -> str:
    text = ast.unparse(expr)
    return text if isinstance(expr, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) else f"({text})"


def _masked_text(step: MaskStep) -> str:
    """Where the step masks (True = masked)."""
    if step.masked_when_true:
        return ast.unparse(step.mask.expr)
    keep = step.mask.expr
    if isinstance(keep, ast.UnaryOp) and isinstance(keep.op, ast.Invert):
        return ast.unparse(keep.operand)
    return f"~{_atom(keep)}"


def decide(step: MaskStep, ctx: Context, facts: sdpa_facts.Facts | None, file: str) -> MaskUse:
    """is_causal, attn_mask, or Refused (the mask's semantics cannot be established)."""
    op = {"fill": "masked_fill", "where": "where", "add": sdpa_facts.ADD_OPS}[step.kind]
    calls = sdpa_facts.at(facts, file, step.line, op)
    if calls == []:
        raise Refused(step.line, f"line {step.line} did not run: the mask is not proven")
    wanted = ADDITIVE if step.kind == "add" else ABOVE if step.masked_when_true else TRIL
    kind = pattern(step.mask.expr, step.mask.stmt, ctx)
    static = kind == wanted
    seen = None if calls is None else all(_causal(step, c) for c in calls)
    if static and seen is False:
        raise Refused(step.line, f"the mask on line {step.line} looks causal in the source, but at run time "
                                 "it is not the causal mask")
    keeps_a_key = step.kind != "add" and kind in KEEPS_A_KEY[step.masked_when_true]
    _check_fill(step, calls, keeps_a_key, ctx)
    if static:
        return MaskUse(True, None, "is_causal=True: the mask is a tril/triu of ones in the source, and nothing in "
                       "the file changes it" + (" (it equals the causal mask at every call seen)" if seen else ""))
    why = f" ({'; '.join(dict.fromkeys(ctx.broken))})" if ctx.broken else ""
    rows = _row_note(step, keeps_a_key)
    if seen:
        return MaskUse(False, _attn_mask_text(step), f"attn_mask=: the mask on line {step.line} equals the causal "
                       f"mask at the calls seen, but is not provably top-left causal for other lengths{why}{rows}",
                       True)
    return MaskUse(False, _attn_mask_text(step), f"attn_mask=: the mask on line {step.line} is not provably "
                                                 f"causal{why}{rows}")


def _row_note(step: MaskStep, keeps_a_key: bool) -> str:
    """What happens on a fully masked row, for the verdict: -inf gives NaN there, SDPA gives 0."""
    if step.kind == "add" or keeps_a_key:
        return ""
    return ("; where a row is fully masked the original's -inf fill gives NaN and SDPA gives 0 (the only "
            "inputs on which they differ)")


def _causal(step: MaskStep, call: dict) -> bool:
    if step.kind == "fill":
        return call["causal"]
    if step.kind == "where":
        return call["drop_causal" if step.masked_when_true else "keep_causal"]
    return call["operands"][step.index]["causal"]


def _check_fill(step: MaskStep, calls: list[dict] | None, keeps_a_key: bool, ctx: Context) -> None:
    """The fill must weigh nothing after softmax, so that -inf (what SDPA uses) gives the same result; a
    finite fill replaces the scores, so on a fully masked row the original averages the values where SDPA's
    mask cannot: it is taken only where the source shows no row is ever fully masked."""
    if step.kind == "add":
        if calls is not None and not all(c["operands"][step.index]["float"] for c in calls):
            raise Refused(step.line, f"the mask added on line {step.line} is not a float tensor at run time")
        if calls is None and pattern(step.mask.expr, step.mask.stmt, ctx) != ADDITIVE:
            raise Refused(step.line, f"what the mask added on line {step.line} holds is known only at run time")
        return
    value = step.value.expr
    if not minus_inf(value) and not keeps_a_key:
        why = f" ({'; '.join(dict.fromkeys(ctx.broken))})" if ctx.broken else ""
        raise Refused(step.line, f"the fill `{ast.unparse(value)}` (line {step.line}) is finite: on a fully "
                                 "masked row (a fully padded sample) the original averages the values, and no "
                                 "SDPA mask does that; nothing in the source shows this mask never masks a "
                                 f"whole row{why}")
    if calls is None:
        if not very_negative(value):
            raise Refused(step.line, f"the fill value `{ast.unparse(value)}` (line {step.line}) is not -inf or "
                                     "the dtype's minimum in the source (the calls seen can prove it)")
        return
    strong = all(c["strong"] if step.kind == "fill" else c["strong"][step.index - 1] for c in calls)
    if not (minus_inf(value) or strong):
        raise Refused(step.line, f"the fill value on line {step.line} is not far enough below the scores "
                                 "to mean 'masked'")


def _attn_mask_text(step: MaskStep) -> str:
    """SDPA's attn_mask: True where attention is allowed (the opposite of masked_fill's mask)."""
    text = ast.unparse(step.mask.expr)
    if not step.masked_when_true:
        return f"({text})" if isinstance(step.mask.expr, ast.IfExp) else text
    expr = step.mask.expr
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1 and isinstance(expr.ops[0], ast.Eq):
        return ast.unparse(ast.Compare(expr.left, [ast.NotEq()], expr.comparators))
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Invert):
        return ast.unparse(expr.operand)
    return f"~{text}" if isinstance(expr, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) else f"~({text})"
