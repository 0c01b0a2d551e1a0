"""`attnprof patch --to-sdpa`: hand-written attention becomes one F.scaled_dot_product_attention call.

The forward runs once to learn which lines of user code run; the functions holding them are read
for attention chains (chain); a second run observes the chain's lines (facts); each
step is proved (the softmax runs over the last dim, the mask's meaning by mask, the GQA
expansion matches enable_gqa) or the chain is refused with the reason. The edit works at AST
positions: the `probs @ v` expression becomes the call, the chain's statements and what only they
used go, everything else (names, comments, other lines) stays byte for byte. Installed packages are
configured, not edited: a transformers model is told `attn_implementation="sdpa"`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from attnprof.fix import dataflow as flow
from attnprof.fix.edits import Edit, installed
from attnprof.fix.source_io import read_source
from attnprof.fix.target import Target
from attnprof.fix.to_sdpa import facts as sdpa_facts
from attnprof.fix.to_sdpa import mask as sdpa_mask
from attnprof.fix.to_sdpa import sizes
from attnprof.fix.to_sdpa import text as sdpa_text
from attnprof.fix.to_sdpa.chain import Chain, Piece, Refused, find
from attnprof.fix.to_sdpa.names import functional_name
from attnprof.fix.to_sdpa.nodes import CASTS
from attnprof.fix.to_sdpa.scale import scale_text

SDPA = "scaled_dot_product_attention"
LIBRARY = ('the attention is in an installed package: configure it, do not edit it (transformers: load the '
           'model with attn_implementation="sdpa", or "flex_attention")')


@dataclass
class Rewrite:
    """One attention chain: rewritten (its edits), or left alone with the reason."""

    file: str
    line: int
    code: str
    safe: bool
    reason: str
    edits: list[Edit] = field(default_factory=list)
    call: str = ""  # the SDPA call written in


@dataclass
class Source:
    """A file read once: its text, tree and the module names it imports."""

    file: str
    text: str  # as Python reads it: its line endings, BOM and coding line honoured (source_io)
    tree: ast.Module
    digest: str = ""  # of the bytes read: the write refuses a file that changed since

    @classmethod
    def read(cls, file: str) -> Source:
        source = read_source(file)
        return cls(file, source.text, ast.parse(source.text), source.digest)

    @property
    def modules(self) -> dict[str, str]:
        return flow.module_names(self.tree)

    def line(self, n: int) -> str:
        lines = self.text.splitlines()
        return lines[n - 1].strip() if 0 < n <= len(lines) else ""

    def class_of(self, fn: ast.AST) -> ast.ClassDef | None:
        return next((c for c in ast.walk(self.tree) if isinstance(c, ast.ClassDef) and fn in c.body), None)


def plan(target: Target, grad: bool = False) -> list[Rewrite]:
    """Every attention chain the target's forward ran in user code: rewritten, or left with the reason."""
    from attnprof.findings.source import executed_functions

    found: list[tuple[Source, Chain | Refused]] = []
    library = []
    for file, lines in sorted(sdpa_facts.lines_run(target, grad).items()):
        source = Source.read(file)
        chains = [(source, c) for fn in executed_functions(source.tree, lines)
                  for c in find(fn, set(source.modules), source.tree)]
        if chains and installed(file):
            library.append(Rewrite(file, chains[0][1].line, source.line(chains[0][1].line), False, LIBRARY))
        elif not installed(file):
            found += chains
    wanted = {(s.file, n) for s, c in found if isinstance(c, Chain) for n in chain_lines(c)}
    facts = sdpa_facts.observe(target, wanted, grad) if wanted else {}
    return library + [rewrite(s, c, facts) for s, c in found]


def chain_lines(chain: Chain) -> set[int]:
    """The lines whose calls the proof needs to see."""
    lines = {chain.line, chain.softmax_line, *(m.line for m in chain.scores.masks)}
    lines |= {stmt.lineno for stmt, _ in chain.expansions.values()}
    lines |= {chain.final_stmt.lineno} | {p.stmt.lineno for p in (*chain.scores.muls, *chain.scores.divs)}
    return lines | ({chain.dropout.line} if chain.dropout else set())


def rewrite(source: Source, chain: Chain | Refused, facts: sdpa_facts.Facts | None) -> Rewrite:
    """The chain proved and edited, or refused: `facts` None proves from the source alone."""
    try:
        if isinstance(chain, Refused):
            raise chain
        call, removed, reasons, size_reads = _decide(source, chain, facts)
        edits = sdpa_text.edits(source.file, source.text, chain, call, removed, source.digest, size_reads)
    except Refused as r:
        return Rewrite(source.file, r.line, source.line(r.line), False, r.reason)
    reason = "; ".join(reasons)
    return Rewrite(source.file, chain.line, source.line(chain.line), True, reason, edits, call)


def _decide(source: Source, chain: Chain, facts) -> tuple[str, list[ast.stmt], list[str], list]:
    """(the call's text, the statements it replaces, why each keyword is what it is, the sizes of the
    scores read on lines that stay, each with its text from q or k)."""
    scores = chain.scores
    matmuls = _check_steps(chain, facts, source.file)
    kwargs, reasons, mask_use, gqa = _keywords(source, chain, facts, matmuls)
    k, v = (chain.expansions["k"][1], chain.expansions["v"][1]) if gqa else (scores.k, chain.v)
    removed = [*chain.steps, *([chain.expansions["k"][0], chain.expansions["v"][0]] if gqa else [])]
    moved = [scores.q, k, v, *scores.muls, *scores.divs, *([m.mask for m in scores.masks] if mask_use and
                                                             not mask_use.causal else [])]
    try:
        dead, size_reads = _dead(chain, removed, moved)
        removed += dead
    except Refused as r:
        if mask_use is not None and mask_use.causal_at_calls_seen:
            raise Refused(r.line, f"{r.reason}; and the mask on line {scores.masks[0].line} equals the causal mask "
                                  "only at the calls seen (is_causal=True is top-left: wrong once the query is "
                                  "shorter than the keys, as with a KV cache)") from None
        raise
    _check_moves(chain, moved, removed)
    args = [_text(source, p.expr) for p in (scores.q, k, v)]
    if not scores.k_transposed:
        args[1] = f"{_atom(source, k.expr)}.transpose(-2, -1)"
    order = ("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    args += [f"{key}={kwargs[key]}" for key in order if key in kwargs]
    call = f"{functional_name(source.modules, source.tree, chain.fn)}.{SDPA}({', '.join(args)})"
    if size_reads:
        lines = ", ".join(sorted({str(read.lineno) for read, _ in size_reads}))
        reasons.append(f"the size of the scores read on line {lines} is read from q and k")
    return call, removed + _unused_imports(source, removed, chain.final, call), reasons, size_reads


def _check_steps(chain: Chain, facts, file: str) -> list[dict] | None:
    """Refuses a chain whose steps SDPA does not compute; returns the scores matmul's calls seen."""
    scores = chain.scores
    _check_softmax(chain, facts, file)
    matmuls = _seen(facts, file, chain.line, sdpa_facts.MATMUL_OPS)
    if scores.positive_dims and matmuls is not None and not all(len(s["shapes"][0] or ()) == 4 for s in matmuls):
        raise Refused(chain.line, "k is transposed by positive dims, and the scores are not 4-D at run time")
    _check_dropout(chain, facts, file)
    _check_dtypes(chain, facts, file)
    return matmuls


def _keywords(source: Source, chain: Chain, facts, matmuls) -> tuple[dict, list[str], object, bool]:
    """SDPA's keywords with why each is what it is, the mask's use and whether K and V go in unexpanded."""
    kwargs, reasons, mask_use, scores, file = {}, [], None, chain.scores, source.file
    ctx = sdpa_mask.Context(chain, source.class_of(chain.fn), set(source.modules), source.tree)
    if scores.masks:
        mask_use = sdpa_mask.decide_all(scores.masks, ctx, facts, file)
        kwargs["attn_mask" if not mask_use.causal else "is_causal"] = mask_use.text or "True"
        reasons.append(mask_use.reason)
    if chain.dropout:
        why = ctx.family.why_not_dropout(chain.dropout.called, ctx.modules) if chain.dropout.called else None
        if why:
            raise Refused(chain.dropout.line, why)
        kwargs["dropout_p"] = chain.dropout.p
        reasons.append("dropout_p follows the dropout's own training flag")
    scale = scale_text(chain, lambda e: _text(source, e), ctx.state, facts, file, ctx.family.why_not_number)
    if scale is not None:
        kwargs["scale"] = scale
        reasons.append(f"scale={scale}: not provably SDPA's default 1/sqrt(q's last dim)")
    elif scores.muls or scores.divs:
        reasons.append("the scale is SDPA's default: 1/sqrt(q's last dim)")
    gqa = _gqa(chain, facts, file, matmuls)
    if gqa:
        kwargs["enable_gqa"] = "True"
        reasons.append("enable_gqa=True instead of repeat_interleave")
    return kwargs, reasons, mask_use, gqa


def _seen(facts, file: str, line: int, ops) -> list[dict] | None:
    calls = sdpa_facts.at(facts, file, line, ops)
    if calls == []:
        raise Refused(line, f"line {line} did not run in the forward attnprof observed")
    return calls


def _check_softmax(chain: Chain, facts, file: str) -> None:
    calls = _seen(facts, file, chain.softmax_line, "softmax")
    over_last = all(c["last"] for c in calls) if calls is not None else chain.softmax_dim == -1
    if not over_last:
        raise Refused(chain.softmax_line, f"the softmax on line {chain.softmax_line} is not over the key "
                                          "dim (the last one)")


def _check_dtypes(chain: Chain, facts, file: str) -> None:
    """SDPA takes q, k and v of one dtype and returns that dtype: the chain must not change it (a softmax
    in float64 then `@ v.double()`), as seen at every call."""
    if facts is None:
        for piece in (chain.scores.q, chain.scores.k, chain.v):
            casts = [n for n in ast.walk(piece.expr) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                     and n.func.attr in CASTS - {"contiguous"}]
            if casts:
                raise Refused(piece.stmt.lineno, f"`{ast.unparse(casts[0])}` casts an operand: whether q, k and v "
                                                 "share one dtype is known only at run time")
    lines = [chain.line, chain.final_stmt.lineno]
    dtypes = {d for line in lines for c in sdpa_facts.at(facts, file, line, sdpa_facts.MATMUL_OPS) or []
              for d in c["dtypes"] if d is not None}
    softmax = sdpa_facts.at(facts, file, chain.softmax_line, "softmax") or []
    widened = {c["out_dtype"] for c in softmax} - dtypes - {"torch.float32"}
    if len(dtypes) > 1 or widened:
        found = ", ".join(sorted(dtypes | widened))
        raise Refused(chain.softmax_line, f"the chain computes in more than one dtype ({found}): SDPA takes q, "
                                          "k and v of one dtype and keeps it")


def _check_dropout(chain: Chain, facts, file: str) -> None:
    if chain.dropout and chain.dropout.module and sdpa_facts.at(facts, file, chain.dropout.line, "dropout") == []:
        raise Refused(chain.dropout.line, f"the call on line {chain.dropout.line} is not a dropout at run time")


def _gqa(chain: Chain, facts, file: str, matmuls: list[dict] | None) -> bool:
    """K and V both expanded by repeat_interleave over the heads dim, by query heads / kv heads."""
    if set(chain.expansions) != {"k", "v"} or matmuls is None:
        return False
    heads = {s["shapes"][0][-3] for s in matmuls if len(s["shapes"][0] or ()) == 4}
    for stmt, _ in chain.expansions.values():
        seen = sdpa_facts.at(facts, file, stmt.lineno, "repeat_interleave") or []
        if not seen or not all(s["heads_dim"] and s["repeats"] and {s["shape"][1] * s["repeats"]} == heads
                               for s in seen):
            return False
    return True


def _dead(chain: Chain, removed: list[ast.stmt], moved: list[Piece]) -> tuple[list[ast.stmt], list]:
    """What only the removed statements read (a mask built per call, a buffer slice, sizes), and each size
    of the scores read on a line that stays with its text from q and k (sizes): a size read of a removed
    tensor that stays and is not provably one of those refuses the rewrite."""
    dead = flow.made_dead(chain.fn, chain.body, removed, chain.final, [p.expr for p in moved])
    gone = [*removed, *dead]
    parent = flow.parents(chain.fn)
    swaps = {}  # by the read's id: one read may see more than one removed binding
    for stmt in removed:
        for name in flow.bound_names(stmt) if isinstance(stmt, ast.Assign) else []:
            for use in flow.loads_after(chain.fn, chain.body, stmt, name):
                inside = any(flow.start(s) <= flow.start(use) and flow.end(use) <= flow.end(s) for s in gone)
                if flow.size_read(use, parent) and not inside and not _within(use, chain.final):
                    swap = sizes.from_operands(chain, use, stmt, gone, parent)
                    if swap is None:
                        raise Refused(use.lineno, f"the size of `{name}` is read on line {use.lineno}, which stays")
                    swaps[id(swap[0])] = swap
    return dead, list(swaps.values())


def _unused_imports(source: Source, removed: list[ast.stmt], final: ast.expr, call: str) -> list[ast.stmt]:
    """`import math` at the top of the file, read only by the removed statements and not by the call."""
    out = []
    for stmt in source.tree.body:
        if not (isinstance(stmt, (ast.Import, ast.ImportFrom)) and len(stmt.names) == 1):
            continue
        alias = stmt.names[0]
        name = alias.asname or alias.name.split(".")[0]
        reads = [n for n in ast.walk(source.tree) if isinstance(n, ast.Name) and n.id == name]
        gone = all(any(_within(n, s) for s in removed) or _within(n, final) for n in reads)
        if reads and gone and not re.search(rf"\b{re.escape(name)}\b", call) and alias.name != "*":
            out.append(stmt)
    return out


def _within(node: ast.AST, root: ast.AST) -> bool:
    return flow.start(root) <= flow.start(node) and flow.end(node) <= flow.end(root)


def _check_moves(chain: Chain, moved: list[Piece], removed: list[ast.stmt]) -> None:
    """Each expression the call takes over must mean at the call what it meant where it was written."""
    for piece in moved:
        if piece.stmt is chain.final_stmt:
            continue
        for name in flow.names_read(piece.expr):
            binding = flow.binding_before(chain.body, name, piece.stmt)
            if binding is not None and any(binding is s for s in removed):
                raise Refused(piece.stmt.lineno, f"`{ast.unparse(piece.expr)}` reads `{name}`, which the "
                                                 "rewrite removes")
            later = flow.rebound_between(chain.body, name, piece.stmt, chain.final_stmt, removed)
            if later is not None:
                raise Refused(later.lineno, f"`{name}` changes on line {later.lineno}, between its use and @ v")


def _text(source: Source, expr: ast.expr) -> str:
    return ast.get_source_segment(source.text, expr) or ast.unparse(expr)


def _atom(source: Source, expr: ast.expr) -> str:
    text = _text(source, expr)
    return text if isinstance(expr, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) else f"({text})"
