"""Edits to the user's source at syntax-tree positions, shared by both rewrites (in place, to SDPA):
applied so that untouched lines stay byte for byte, checked to parse, and shown as a unified diff.
"""

from __future__ import annotations

import ast
import difflib
import io
import sysconfig
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from attnprof.files import shown
from attnprof.fix.source_io import PatchRefused, read_source


@dataclass(frozen=True)
class Edit:
    file: str
    line: int
    code: str
    safe: bool
    reason: str
    span: tuple[int, int, int, int] | None = None  # (line, col, end line, end col) replaced, 1-based lines
    text: str = ""
    digest: str = ""  # hash of the file the edit was planned on: a different file is not patched


def installed(file: str) -> bool:
    paths = sysconfig.get_paths()
    return any(Path(file).resolve().is_relative_to(paths[k]) for k in ("purelib", "platlib"))


def apply(text: str, edits: list[Edit]) -> str:
    """`text` with the safe edits' spans replaced; untouched lines stay byte for byte."""
    lines = io.StringIO(text, newline="").readlines()  # as Python numbers them: \n, \r\n or \r
    for e in sorted((e for e in edits if e.safe), key=lambda e: e.span, reverse=True):
        (l0, c0, l1, c1) = e.span
        head = lines[l0 - 1][:char_col(lines[l0 - 1], c0)]
        tail = lines[l1 - 1][char_col(lines[l1 - 1], c1):] if l1 <= len(lines) else ""
        lines[l0 - 1:l1] = [head + e.text + tail]
    return "".join(lines)


def char_col(line: str, col: int) -> int:
    """ast columns count UTF-8 bytes; string slicing counts characters."""
    return len(line.encode()[:col].decode(errors="ignore"))


def patched_sources(edits: list[Edit]) -> dict[str, tuple[str, str]]:
    """{file: (old text, new text)} for each file with a safe edit; raises PatchRefused when a file is not
    the one the edits were planned on, or the edited file would not parse."""
    by_file = defaultdict(list)
    for e in edits:
        if e.safe:
            by_file[e.file].append(e)
    out = {}
    for file, mine in by_file.items():
        source = read_source(file)
        if any(e.digest and e.digest != source.digest for e in mine):
            raise PatchRefused(f"{shown(file)} changed since it was profiled: nothing patched; run patch again")
        new = apply(source.text, mine)
        try:
            ast.parse(new)
        except SyntaxError as e:
            raise PatchRefused(f"{shown(file)}: the rewritten file would not parse ({e.msg}, line {e.lineno}): "
                               "nothing patched") from None
        out[file] = (source.text, new)
    return out


def unified_diff(sources: dict[str, tuple[str, str]]) -> str:
    chunks = []
    for file, (old, new) in sorted(sources.items()):
        diff = difflib.unified_diff(io.StringIO(old, newline="").readlines(), io.StringIO(new, newline="").readlines(),
                                    f"a/{shown(file)}", f"b/{shown(file)}")
        chunks += [ln if ln.endswith(("\n", "\r")) else ln + "\n\\ No newline at end of file\n" for ln in diff]
    return "".join(chunks)
