"""`attnprof patch`: rewrite out-of-place `masked_fill` in the user's source where in place is safe.

A rewrite needs two proofs and a check. The source (`safety`): the masked tensor is made by the
function and read by nothing after the statement. The running forward (here): each call on that line
gets a tensor that needs no grad, is not a view, and keeps its shape (out of place broadcasts; in
place cannot). Then `checked` runs the rewritten module against the original (fix.differential:
same weights, the calls seen and variations, gradients, what is left in inputs and buffers), because
a source proof can be fooled (a helper named like a torch factory that returns a cached tensor) and
the forward seen ran without grads (inplace/checked.py); only an edit that passes all three is written. The edit works
at syntax-tree positions: `x = x.masked_fill` becomes `x.masked_fill_` (and
`t = x.masked_fill` becomes `t = x.masked_fill_`), whatever wraps it (parentheses, a call split over
lines), and the rewritten file must parse to the same tree but for that change, or the line is left
alone with the reason. Only the file that ran is patched (its hash is taken when it is profiled);
`source_io` keeps its bytes. Installed packages are never edited.
"""

from __future__ import annotations

import ast
import copy
import tokenize
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from attnprof.files import shown
from attnprof.fix.edits import Edit, apply, char_col, installed
from attnprof.fix.inplace import safety
from attnprof.fix.lint import user_line
from attnprof.fix.source_io import PatchRefused, SourceFile, file_digest, read_source
from attnprof.fix.target import Target


@dataclass
class Observed:
    """What the calls on one source line saw at run time."""

    calls: int = 0
    problems: set[str] = field(default_factory=set)
    digest: str | None = None  # the file's hash when the line first ran


def observe(target: Target, grad: bool = False) -> dict[tuple[str, int], Observed]:
    """Run the forward once and record each out-of-place masked_fill called from user code."""
    import torch
    from torch.overrides import TorchFunctionMode

    seen: dict[tuple[str, int], Observed] = defaultdict(Observed)

    class Watch(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            where = user_line() if getattr(func, "__name__", "") == "masked_fill" else None
            if where is not None and isinstance(args[0], torch.Tensor):
                _note(seen[where], args[0], out)
                seen[where].digest = seen[where].digest or file_digest(where[0])
            return out

    with torch.set_grad_enabled(grad), Watch():
        target()
    return dict(seen)


def _note(obs: Observed, x, out) -> None:
    obs.calls += 1
    if x.requires_grad or out.requires_grad:
        obs.problems.add("autograd is on: the tensor requires grad, and backward may need the old value")
    if x._base is not None:
        obs.problems.add("at run time the masked tensor is a view of another tensor")
    if tuple(out.shape) != tuple(x.shape):
        obs.problems.add(f"the mask broadcasts {tuple(x.shape)} to {tuple(out.shape)}: in place cannot grow")


def plan(target: Target, grad: bool = False) -> list[Edit]:
    """Every out-of-place masked_fill the forward ran in user code: rewritten, or left with the reason.
    Raises PatchRefused when a file changed since it ran: its lines may hold other statements now."""
    edits, sources = [], {}
    for (file, line), obs in sorted(observe(target, grad).items()):
        if file not in sources:
            sources[file] = read_source(file)
            ran = target.digest if target.digest and Path(file).resolve() == target.file else obs.digest
            if sources[file].digest != ran:
                raise PatchRefused(f"{shown(file)} changed since it was profiled (line {line} may hold another "
                                   "statement now): nothing patched; run patch again")
        edit = _judge_line(sources[file], line, obs)
        if edit is not None:
            edits.append(edit)
    return edits


def _judge_line(source: SourceFile, line: int, obs: Observed) -> Edit | None:
    file, tree = source.file, ast.parse(source.text)
    found = _statement_at(tree, line)
    if found is None:
        return Edit(file, line, source.line(line), False, "result not assigned to a name: `t = x.masked_fill(...)`")
    fn, stmt = found
    if installed(file):
        return Edit(file, line, source.line(line), False, "an installed package: use attnprof.patch(module) at "
                    "run time")
    verdict = safety.judge(fn, stmt)
    if verdict.safe and obs.problems:
        verdict = safety.Verdict(False, "; ".join(sorted(obs.problems)))
    if not verdict.safe:
        return Edit(file, stmt.lineno, source.line(stmt.lineno), False, verdict.reason)
    return _in_place(source, tree, stmt, verdict.reason)


def _in_place(source: SourceFile, tree: ast.Module, stmt: ast.Assign, reason: str) -> Edit:
    """The edit that makes `stmt` in place, checked: the file must parse to the same tree but for it."""
    call, receiver = safety.out_of_place_fill(stmt)
    end = (call.func.end_lineno, call.func.end_col_offset)
    rebinds = stmt.targets[0].id == receiver.id  # `x = x.masked_fill(...)`: the assignment goes
    start = _after_assign(source, stmt) if rebinds else (stmt.lineno, stmt.col_offset)
    kept = source.text[source.offset(*start):source.offset(*end)]
    edit = Edit(source.file, stmt.lineno, source.line(stmt.lineno), True, reason,
                (stmt.lineno, stmt.col_offset, *end), kept + "_", source.digest)
    try:
        same = ast.dump(ast.parse(apply(source.text, [edit]))) == ast.dump(_expected(tree, stmt))
    except SyntaxError as e:
        return Edit(source.file, stmt.lineno, edit.code, False, f"the rewritten line would not parse ({e.msg})")
    if not same:
        return Edit(source.file, stmt.lineno, edit.code, False, "the rewrite would change more than this call")
    return edit


def _after_assign(source: SourceFile, stmt: ast.Assign) -> tuple[int, int]:
    """(line, byte column) just after the statement's `=` and the blanks that follow it on its line."""
    lines = source.lines()
    first = lines[stmt.lineno - 1]
    lead = char_col(first, stmt.col_offset)
    rest = iter([first[lead:], *lines[stmt.lineno:]])
    depth = 0
    for tok in tokenize.generate_tokens(lambda: next(rest, "")):
        if tok.type != tokenize.OP:
            continue
        depth += (tok.string in ("(", "[", "{")) - (tok.string in (")", "]", "}"))
        if tok.string == "=" and depth == 0:
            row, col = tok.end
            line = stmt.lineno + row - 1
            col += lead if row == 1 else 0
            text = lines[line - 1]
            while col < len(text) and text[col] in " \t":
                col += 1
            return line, len(text[:col].encode())
    raise ValueError(f"no `=` in the statement on line {stmt.lineno}")  # an Assign always has one


def _expected(tree: ast.Module, stmt: ast.Assign) -> ast.Module:
    """`tree` as the rewrite should leave it: that one call in place."""

    class InPlace(ast.NodeTransformer):
        def visit_Assign(self, node: ast.Assign) -> ast.AST:
            if (node.lineno, node.col_offset) != (stmt.lineno, stmt.col_offset):
                return node
            call, receiver = safety.out_of_place_fill(node)
            call.func.attr = "masked_fill_"
            return ast.Expr(call) if node.targets[0].id == receiver.id else node

    return InPlace().visit(copy.deepcopy(tree))


def _statement_at(tree: ast.Module, line: int) -> tuple[ast.AST, ast.Assign] | None:
    """(function, statement) for a `t = x.masked_fill(...)` statement spanning `line`."""
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for stmt in ast.walk(fn):
            if (isinstance(stmt, ast.stmt) and stmt.lineno <= line <= stmt.end_lineno
                    and safety.out_of_place_fill(stmt) and _innermost_function(fn, stmt)):
                return fn, stmt
    return None


def _innermost_function(fn: ast.AST, stmt: ast.stmt) -> bool:
    inner = [n for n in ast.walk(fn) if isinstance(n, safety.FUNCTIONS[:2]) and n is not fn]
    return not any(n.lineno <= stmt.lineno <= n.end_lineno for n in inner)


