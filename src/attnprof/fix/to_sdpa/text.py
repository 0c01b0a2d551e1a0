"""The text of a rewrite to SDPA: the call over `probs @ v`, wrapped the way the file wraps, the lines of
removed statements deleted, and a blank line the deletion would double. Comments stay, a licence over a
removed import too: a rewrite touches only the chain's own lines. Edits are AST positions for edits.apply:
nothing else moves.
"""

from __future__ import annotations

import ast

from attnprof.fix.edits import Edit
from attnprof.fix.to_sdpa.chain import Chain, Refused


def edits(file: str, text: str, chain: Chain, call: str, removed: list[ast.stmt], digest: str = "",
          sizes: list[tuple[ast.expr, str]] = ()) -> list[Edit]:
    """The call over `probs @ v`, wrapped like the file's lines (and with its line endings); removed
    statements' lines deleted; each size of the scores read on a line that stays replaced by its text
    (`w.size(-1)` -> `k.size(-2)`), the rest of that line byte for byte."""
    lines = text.splitlines()
    newline = "\r\n" if "\r\n" in text else "\r" if "\r" in text else "\n"
    reason = "hand-written attention → one SDPA call"
    final = chain.final
    head = lines[final.lineno - 1].encode()[:final.col_offset].decode(errors="ignore")
    wrapped = _wrap(call, len(head), len(head) - len(head.lstrip()), _width(lines))
    code = lines[chain.line - 1].strip()
    out = [Edit(file, final.lineno, code, True, reason,
                (final.lineno, final.col_offset, final.end_lineno, final.end_col_offset),
                wrapped.replace("\n", newline), digest)]
    for read, new in sizes:
        out.append(Edit(file, read.lineno, lines[read.lineno - 1].strip(), True, "the scores' size read from q and k",
                        (read.lineno, read.col_offset, read.end_lineno, read.end_col_offset), new, digest))
    for first, last in _deleted_runs(lines, removed):
        out.append(Edit(file, first, lines[first - 1].strip(), True, reason, (first, 0, last + 1, 0), "", digest))
    return out


def _width(lines: list[str]) -> int:
    """The longest code line of the file, at least 79: the call wraps where the user's lines do."""
    return max([79, *(len(ln) for ln in lines if not ln.lstrip().startswith("#"))])


def _wrap(call: str, column: int, indent: int, width: int) -> str:
    """`call` on one line if it fits after `column`; else its arguments wrapped under its paren, or
    (when that is past the middle of the line) on lines of their own one indent in."""
    if column + len(call) <= width:
        return call
    open_at = call.index("(") + 1
    aligned = column + open_at <= width // 2
    indent = column + open_at if aligned else indent + 4
    out, current = [call[:open_at]] if not aligned else [], call[:open_at] if aligned else " " * indent
    offset = column if aligned else 0
    for part in _split_args(call[open_at:-1]):
        sep = "" if current.endswith("(") or not current.strip() else " "
        if sep and offset + len(current) + len(sep) + len(part) + 1 > width:
            out.append(current)
            current, offset, sep = " " * indent, 0, ""
        current += sep + part + ","
    out.append(current[:-1] + ")")
    return "\n".join(out)


def _split_args(text: str) -> list[str]:
    """Top-level comma-separated parts of an argument list."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    return [*parts, current.strip()] if current.strip() else parts


def _deleted_runs(lines: list[str], removed: list[ast.stmt]) -> list[tuple[int, int]]:
    """Runs of lines to delete: each removed statement's, and a blank line the deletion would leave
    right under a block's header or next to another blank line."""
    doomed = set()
    for stmt in removed:
        before = lines[stmt.lineno - 1].encode()[:stmt.col_offset].decode(errors="ignore")
        after = lines[stmt.end_lineno - 1].encode()[stmt.end_col_offset:].decode(errors="ignore").strip()
        if before.strip() or (after and not after.startswith("#")):
            raise Refused(stmt.lineno, f"line {stmt.lineno} holds another statement next to the one to remove")
        doomed |= set(range(stmt.lineno, stmt.end_lineno + 1))
    for first, last in _runs(doomed):
        if _blank_or_header(lines, first - 1) and last < len(lines) and not lines[last].strip():
            doomed.add(last + 1)  # no blank line left under a header or next to another blank
    return _runs(doomed)


def _blank_or_header(lines: list[str], n: int) -> bool:
    """Line n (1-based) is blank, a block's header (`def ...:`), or outside the file."""
    if n < 1 or n > len(lines):
        return True
    return not lines[n - 1].strip() or lines[n - 1].rstrip().endswith(":")


def _runs(numbers: set[int]) -> list[tuple[int, int]]:
    runs, first = [], 0
    for n in sorted(numbers):
        first = n if n - 1 not in numbers else first
        if n + 1 not in numbers:
            runs.append((first, n))
    return runs
