"""`attnprof patch`: rewrite out-of-place `masked_fill` in the user's source where in place is safe.

A rewrite needs two proofs. The source (`patch_safety`): the masked tensor is made by the function
and read by nothing after the statement. The running forward (here): each call on that line gets a
tensor that needs no grad, is not a view, and keeps its shape (out of place broadcasts; in place
cannot). Only the characters `t = x.masked_fill` change, to `x.masked_fill_`, so the rest of each
line and the file keep their formatting. Installed packages are never edited.
"""

from __future__ import annotations

import ast
import difflib
import os
import sysconfig
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from attnprof.files import shown
from attnprof.fix import safety
from attnprof.fix.lint import user_line
from attnprof.fix.target import Target


@dataclass
class Observed:
    """What the calls on one source line saw at run time."""

    calls: int = 0
    problems: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Edit:
    file: str
    line: int
    code: str
    safe: bool
    reason: str
    span: tuple[int, int, int, int] | None = None  # (line, col, end line, end col) replaced, 1-based lines
    text: str = ""


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
    """Every out-of-place masked_fill the forward ran in user code: rewritten, or left with the reason."""
    edits = []
    for (file, line), obs in sorted(observe(target, grad).items()):
        edit = _judge_line(file, line, obs)
        if edit is not None:
            edits.append(edit)
    return edits


def _judge_line(file: str, line: int, obs: Observed) -> Edit | None:
    tree = ast.parse(Path(file).read_text())
    found = _statement_at(tree, line)
    code = _line_text(file, line)
    if found is None:
        return Edit(file, line, code, False, "result not assigned to a name: `t = x.masked_fill(...)`")
    fn, stmt = found
    if _installed(file):
        return Edit(file, line, code, False, "an installed package: use attnprof.patch(module) at run time")
    verdict = safety.judge(fn, stmt)
    if verdict.safe and obs.problems:
        verdict = safety.Verdict(False, "; ".join(sorted(obs.problems)))
    if not verdict.safe:
        return Edit(file, stmt.lineno, _line_text(file, stmt.lineno), False, verdict.reason)
    call, receiver = safety.out_of_place_fill(stmt)
    span = (stmt.lineno, stmt.col_offset, call.func.end_lineno, call.func.end_col_offset)
    return Edit(file, stmt.lineno, _line_text(file, stmt.lineno), True, verdict.reason, span,
                f"{receiver.id}.masked_fill_")


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


def _installed(file: str) -> bool:
    paths = sysconfig.get_paths()
    return any(Path(file).resolve().is_relative_to(paths[k]) for k in ("purelib", "platlib"))


def _line_text(file: str, line: int) -> str:
    return Path(file).read_text().splitlines()[line - 1].strip()


def apply(text: str, edits: list[Edit]) -> str:
    """`text` with the safe edits' spans replaced; untouched lines stay byte for byte."""
    lines = text.splitlines(keepends=True)
    for e in sorted((e for e in edits if e.safe), key=lambda e: e.span, reverse=True):
        (l0, c0, l1, c1) = e.span
        head = lines[l0 - 1][:_byte_col(lines[l0 - 1], c0)]
        tail = lines[l1 - 1][_byte_col(lines[l1 - 1], c1):]
        lines[l0 - 1:l1] = [head + e.text + tail]
    return "".join(lines)


def _byte_col(line: str, col: int) -> int:
    """ast columns count UTF-8 bytes; string slicing counts characters."""
    return len(line.encode()[:col].decode(errors="ignore"))


def patched_sources(edits: list[Edit]) -> dict[str, tuple[str, str]]:
    """{file: (old text, new text)} for each file with a safe edit."""
    by_file = defaultdict(list)
    for e in edits:
        if e.safe:
            by_file[e.file].append(e)
    out = {}
    for file, mine in by_file.items():
        old = Path(file).read_text()
        out[file] = (old, apply(old, mine))
    return out


def unified_diff(sources: dict[str, tuple[str, str]]) -> str:
    chunks = []
    for file, (old, new) in sorted(sources.items()):
        chunks += difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                       f"a/{shown(file)}", f"b/{shown(file)}")
    return "".join(chunks)


def write(sources: dict[str, tuple[str, str]]) -> list[Path]:
    """Apply each file's new text atomically, after saving the original as `<file>.orig`."""
    from attnprof.files import write_atomic

    written = []
    for file, (old, new) in sorted(sources.items()):
        path, backup = Path(file), Path(f"{file}.orig")
        if path.read_text() != old:
            raise ValueError(f"{file} changed while attnprof was reading it; run patch again")
        if backup.exists():
            raise ValueError(f"{backup} already exists: move it away first, it may be your only original")
        mode = path.stat().st_mode
        write_atomic(backup, old)
        write_atomic(path, new)
        os.chmod(path, mode)  # the temporary file's 0600 would replace the user's mode
        written.append(path)
    return written
