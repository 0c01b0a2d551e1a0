"""Hand-written attention in a function's source: the steps from q @ kᵀ through softmax to @ v.

`find(fn, modules)` reads one function (a forward, or a helper it calls) and returns each chain it
holds, or why a softmax between two matmuls cannot be read as one. A chain, over names bound once
each in one block:

    scores = q @ k.transpose(-2, -1)        # torch.matmul / bmm; k.mT; a k transposed earlier
    scores = scores * scale                 # or / d; on its own line or the same one; any number
    scores = scores.masked_fill(m, -inf)    # or torch.where(m, scores, fill), or scores + mask; one
    probs = F.softmax(scores, dim=-1)       # torch., method, nn.Softmax(dim=-1)(...); casts around it
    probs = self.attn_dropout(probs)        # or F.dropout(probs, p, training=...)
    y = probs @ v                           # or torch.matmul; inside a larger expression too

Every intermediate is read by the next step only; a size read (`w.size(-1)`) is allowed where the
rewrite makes its statement dead. K and V expanded with repeat_interleave are noted for
enable_gqa. What the steps mean at run time (the softmax's dim, what the mask holds) is for
`to_sdpa` to prove with the calls it observed; this module reads only the source.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace

from attnprof.fix import dataflow as flow
from attnprof.fix.to_sdpa import forms, nodes

TOP_LEFT = ((-2, -1), (-1, -2), (2, 3), (3, 2))  # transposes of the last two dims (2, 3: a 4-D tensor)


class Refused(Exception):
    """Softmax between two matmuls that cannot be read as attention; `reason` says which step."""

    def __init__(self, line: int, reason: str):
        super().__init__(reason)
        self.line, self.reason = line, reason


@dataclass(frozen=True)
class Piece:
    """An expression the SDPA call takes over, and the statement it was written in."""

    expr: ast.expr
    stmt: ast.stmt


@dataclass(frozen=True)
class MaskStep:
    kind: str  # fill (masked_fill) | where | add (a float mask)
    mask: Piece
    value: Piece | None  # the fill value of fill and where
    masked_when_true: bool  # fill: True; where(m, scores, v): False; where(m, v, scores): True
    line: int
    index: int = 0  # the call's argument that is not the scores: where (1 or 2), add (0 or 1)


@dataclass(frozen=True)
class Scores:
    """What the back-trace from softmax's input found: q and k, the scale, the mask, the statements."""

    q: Piece
    k: Piece
    k_transposed: bool  # the source transposes k itself (k.transpose(-2, -1)); else k is kᵀ already
    positive_dims: bool  # k.transpose(2, 3): right only for a 4-D k (the observed shapes tell)
    line: int
    muls: tuple[Piece, ...] = ()
    divs: tuple[Piece, ...] = ()
    masks: tuple[MaskStep, ...] = ()
    steps: tuple[ast.stmt, ...] = ()
    links: tuple[tuple[ast.stmt, str, ast.Name], ...] = ()  # (binding, name, its one consumer)
    scaled_after_mask: int | None = None  # the line of a scale applied to already-masked scores


@dataclass(frozen=True)
class Dropout:
    p: str  # dropout_p's text: bound to the training flag
    line: int
    module: bool  # `self.attn_dropout(probs)`: the observed calls must show a dropout there
    called: ast.expr | None = None  # the module called (`self.attn_dropout`): provably an nn.Dropout?


@dataclass
class Chain:
    fn: ast.AST
    body: list[ast.stmt]
    final: ast.expr  # `probs @ v`: the expression the call replaces
    final_stmt: ast.stmt
    scores: Scores
    v: Piece
    softmax_line: int
    softmax_dim: int | None  # the literal dim; None when the observed call must tell
    dropout: Dropout | None
    steps: list[ast.stmt]  # statements the rewrite removes
    expansions: dict[str, tuple[ast.stmt, Piece]] = field(default_factory=dict)  # k/v: (stmt, unexpanded)

    @property
    def line(self) -> int:
        return self.scores.line


def find(fn: ast.AST, modules: set[str], tree: ast.Module | None = None) -> list[Chain | Refused]:
    """Each softmax of `fn` that sits between two matmuls: its chain, or why it is not one.
    `modules`: names the file binds to modules (torch, F, nn, math), to tell F.softmax(x) from x.softmax();
    `tree`: the file, for what it defines (a `self.softmax` module, a mask-adding helper)."""
    own = list(flow.own_nodes(fn))
    known = forms.Known.of(tree, fn)
    ends = sorted(flow.end(n) for n in own if nodes.matmul_operands(n))
    out: list[Chain | Refused] = []
    for call in (n for n in own if forms.softmax_input(n, modules, known)):
        if not (any(e < flow.end(call) for e in ends) and any(e > flow.end(call) for e in ends)):
            continue
        try:
            out.append(_Reader(fn, modules, known).chain(call))
        except Refused as r:
            out.append(r)
    return out


class _Reader:
    def __init__(self, fn: ast.AST, modules: set[str], known: forms.Known):
        self.fn, self.modules, self.parent, self.known = fn, modules, flow.parents(fn), known

    def chain(self, call: ast.Call) -> Chain:
        stmt = self.statement(call)
        body = flow.block_of(self.fn, stmt)
        if body is None or flow.in_loop(self.fn, stmt):
            raise Refused(call.lineno, "the softmax is inside a loop: its values may be read on the next turn")
        self.body = body
        source, dim = forms.softmax_input(call, self.modules, self.known)
        scores = self.scores(source, stmt)
        final, final_stmt, dropout, steps = self.output(call, stmt)
        links = [*scores.links, *steps[1]]
        for binding, name, consumer in links:
            self.only_use(binding, name, consumer)
        chain = Chain(self.fn, body, final, final_stmt, scores, Piece(nodes.matmul_operands(final)[1], final_stmt),
                      call.lineno, dim, dropout, [*scores.steps, *steps[0]])
        chain.expansions = {name: x for name, piece in (("k", scores.k), ("v", chain.v))
                            if (x := self.expansion(piece, chain)) is not None}
        return chain

    def statement(self, node: ast.AST) -> ast.stmt:
        while not isinstance(node, ast.stmt):
            node = self.parent[node]
        return node

    def scores(self, expr: ast.expr, stmt: ast.stmt) -> Scores:
        """Back from softmax's input to q @ kᵀ; each step kind is one branch."""
        expr = nodes.uncast(expr)
        if isinstance(expr, ast.Name):
            found = flow.binding_before(self.body, expr.id, stmt)
            if isinstance(found, (ast.If, ast.AugAssign)):
                return self.added(found, expr)
            binding = self.binding(expr.id, stmt)
            found = self.scores(binding.value, binding)
            return replace(found, steps=(*found.steps, binding), links=(*found.links, (binding, expr.id, expr)))
        if nodes.einsum_kind(expr) == "scores":
            return Scores(Piece(expr.args[1], stmt), Piece(expr.args[2], stmt), True, False, expr.lineno)
        if (operands := nodes.matmul_operands(expr)) is not None:
            return _scores_of(*operands, stmt, expr.lineno)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div):
            found = _scaled(self.scores(expr.left, stmt), expr)
            return replace(found, divs=(*found.divs, Piece(expr.right, stmt)))
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Mult, ast.Add)):
            return self.either(expr, expr.left, expr.right, stmt)
        if nodes.method(expr, "masked_fill") and len(expr.args) == 2:
            found = self.scores(expr.func.value, stmt)
            step = MaskStep("fill", Piece(expr.args[0], stmt), Piece(expr.args[1], stmt), True, expr.lineno)
            return replace(found, masks=(*found.masks, step))
        if nodes.function(expr, "where", self.modules) and len(expr.args) == 3:
            return self.either(expr, expr.args[1], expr.args[2], stmt)
        helper = self.known.helpers.get(expr.func.id) if isinstance(expr, ast.Call) and isinstance(
            expr.func, ast.Name) else None
        if helper is not None and len(expr.args) == 2 and not expr.keywords:
            found = self.scores(expr.args[0], stmt)
            step = MaskStep("add", Piece(expr.args[1], stmt), None, False, helper[2], 1)
            return replace(found, masks=(*found.masks, step))
        blocker = forms.blocker(expr)
        raise Refused(expr.lineno, f"`{nodes.short(expr)}` (line {expr.lineno}): "
                                   + (blocker or "a step between the scores and softmax that attnprof does not know"))

    def added(self, found: ast.If | ast.AugAssign, expr: ast.Name) -> Scores:
        """`if m is not None: s = s + m` or `s += bias`: an added mask, as one step."""
        if isinstance(found, ast.If):
            cond = forms.conditional_add(found, expr.id, self.fn, self.body)
            if cond is None:
                blocker = forms.blocker(found) or forms.conditional_blocker(found, expr.id)
                raise Refused(found.lineno, f"`{expr.id}` is changed under `if {nodes.short(found.test)}:` (line "
                                            f"{found.lineno}): {blocker}")
            scores, mask, index, line = cond.scores, cond.mask, cond.index, cond.add.lineno
        else:
            parts = forms.added(found, expr.id)
            if parts is None:
                raise Refused(found.lineno, f"`{expr.id}` is set by `{nodes.short(found)}` (line {found.lineno}), "
                                            "not by one plain assignment")
            (_, mask, index), scores, line = parts, found.target, found.lineno
        inner = self.scores(scores, found)
        step = MaskStep("add", Piece(mask, found), None, False, line, index)
        return replace(inner, masks=(*inner.masks, step), steps=(*inner.steps, found),
                       links=(*inner.links, (found, expr.id, expr)))

    def either(self, expr: ast.expr, a: ast.expr, b: ast.expr, stmt: ast.stmt) -> Scores:
        """A two-operand step (`*`, `+`, where): the operand that leads back to q @ kᵀ is the scores."""
        try:
            found, other, first = self.scores(a, stmt), b, True
        except Refused as e:
            try:
                found, other, first = self.scores(b, stmt), a, False
            except Refused:
                raise e from None
        piece = Piece(other, stmt)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mult):
            return replace(_scaled(found, expr), muls=(*found.muls, piece))
        if isinstance(expr, ast.BinOp):
            step = MaskStep("add", piece, None, False, expr.lineno, 1 if first else 0)
            return replace(found, masks=(*found.masks, step))
        step = MaskStep("where", Piece(expr.args[0], stmt), piece, not first, expr.lineno, 2 if first else 1)
        return replace(found, masks=(*found.masks, step))

    def binding(self, name: str, stmt: ast.stmt) -> ast.Assign:
        found = flow.binding_before(self.body, name, stmt)
        if found is None:
            raise Refused(stmt.lineno, f"`{name}` (line {stmt.lineno}) is not made from q @ kᵀ in this function")
        if not (isinstance(found, ast.Assign) and len(found.targets) == 1
                and isinstance(found.targets[0], ast.Name)):
            raise Refused(found.lineno, f"`{name}` is set by `{nodes.short(found)}` (line {found.lineno}), "
                                        "not by one plain assignment")
        return found

    def output(self, node: ast.expr, stmt: ast.stmt):
        """Forward from the softmax to `@ v`: (final matmul, its statement, dropout, (steps, links))."""
        steps, links, dropout = [], [], None
        while True:
            parent = self.parent[node]
            cast = isinstance(parent, ast.Attribute) and parent.attr in nodes.CASTS
            if cast and nodes.method(self.parent[parent], parent.attr):
                node = self.parent[parent]
            elif (p := forms.dropout_p(parent, node, self.modules)) is not None:
                dropout, node = Dropout(p[0], parent.lineno, p[1], parent.func if p[1] else None), parent
            elif (operands := nodes.matmul_operands(parent)) is not None and operands[0] is node \
                    and nodes.einsum_kind(parent) != "scores":
                return parent, stmt, dropout, (steps, links)
            elif isinstance(parent, ast.Attribute) and nodes.matmul_operands(self.parent.get(parent)):
                return self.parent[parent], stmt, dropout, (steps, links)  # `probs.matmul(v)`
            elif parent is stmt and isinstance(stmt, ast.Assign) and nodes.one_name(stmt):
                name = stmt.targets[0].id
                uses = [u for u in flow.loads_after(self.fn, self.body, stmt, name)
                        if not flow.size_read(u, self.parent)]
                if len(uses) != 1:
                    raise _used_elsewhere(name, uses, "probabilities", stmt, self.fn)
                steps.append(stmt)
                links.append((stmt, name, uses[0]))
                node, stmt = uses[0], self.statement(uses[0])
                if stmt not in self.body:
                    raise Refused(stmt.lineno, f"`{name}` is used inside another block (line {stmt.lineno})")
            else:
                raise Refused(parent.lineno, f"the probabilities go to `{nodes.short(parent)}` (line {parent.lineno}), "
                                             "not to `@ v`")

    def only_use(self, binding: ast.stmt, name: str, consumer: ast.Name) -> None:
        uses = [u for u in flow.loads_after(self.fn, self.body, binding, name)
                if u is not consumer and not flow.size_read(u, self.parent)]
        then = self.statement(consumer)
        while not any(then is s for s in self.body) and then in self.parent:
            then = self.statement(self.parent[then])
        if flow.binds(then, name):  # `s += bias`, `if m is not None: s = s + m`: later reads are of the new s
            uses = [u for u in uses if flow.start(u) < flow.end(then)]
        if uses:
            raise _used_elsewhere(name, uses, "scores", binding, self.fn)

    def expansion(self, piece: Piece, chain: Chain) -> tuple[ast.stmt, Piece] | None:
        """`k = x.repeat_interleave(n, dim=1)` read by this chain only: (its statement, x)."""
        if not isinstance(piece.expr, ast.Name):
            return None
        stmt = flow.binding_before(self.body, piece.expr.id, piece.stmt)
        value = stmt.value if isinstance(stmt, ast.Assign) and nodes.one_name(stmt) else None
        if nodes.function(value, "repeat_interleave", self.modules) and value.args:
            source = value.args[0]
        elif nodes.method(value, "repeat_interleave"):
            source = value.func.value
        else:
            return None
        others = [u for u in flow.loads_after(self.fn, self.body, stmt, piece.expr.id) if u is not piece.expr]
        return None if others else (stmt, Piece(source, stmt))


def _scaled(found: Scores, scale: ast.expr) -> Scores:
    """Notes a scale applied after a mask step: SDPA adds its mask to scores already scaled."""
    return replace(found, scaled_after_mask=scale.lineno) if found.masks and found.scaled_after_mask is None \
        else found


def _scores_of(q: ast.expr, kt: ast.expr, stmt: ast.stmt, line: int) -> Scores:
    kt = nodes.uncast(kt)
    if isinstance(kt, ast.Attribute) and kt.attr == "mT":
        return Scores(Piece(q, stmt), Piece(kt.value, stmt), True, False, line)
    if nodes.method(kt, "permute") and [nodes.int_literal(a) for a in kt.args] == [0, 1, 3, 2]:
        return Scores(Piece(q, stmt), Piece(kt.func.value, stmt), True, True, line)  # 4-D: the facts tell
    if nodes.method(kt, "transpose") and len(kt.args) == 2 and not kt.keywords:
        dims = tuple(nodes.int_literal(a) for a in kt.args)
        if dims in TOP_LEFT:
            return Scores(Piece(q, stmt), Piece(kt.func.value, stmt), True, dims[0] > 0, line)
    return Scores(Piece(q, stmt), Piece(kt, stmt), False, False, line)


def _used_elsewhere(name: str, uses: list[ast.Name], what: str, binding: ast.stmt, fn: ast.AST) -> Refused:
    if not uses:
        return Refused(binding.lineno, f"the {what} `{name}` (line {binding.lineno}) are never read")
    given = forms.returned(uses, fn)
    if given is not None:
        return Refused(binding.lineno, f"the attention {'weights' if what == 'probabilities' else what} `{name}` "
                                       f"(line {binding.lineno}) are handed to the caller (line {given}): SDPA "
                                       "never computes them (transformers: output_attentions needs eager attention)")
    lines = ", ".join(str(u.lineno) for u in uses)
    return Refused(binding.lineno, f"the {what} `{name}` (line {binding.lineno}) are also read on line {lines}: "
                                   "SDPA never materialises them")
