"""The user's source files, read and written so that only what a patch changes changes.

A file is read as Python reads it (its BOM or `coding:` line names the encoding) with its line
endings kept, and written back in the same encoding: CRLF stays CRLF, a BOM stays, tabs and a
missing final newline stay. Every patch (masked_fill in place, to SDPA) goes through `write`, which
checks every file before it writes any: unchanged since it was read, the new text parses, the file
is writable by its mode and its folder, and no `<file>.orig` is in the way. Then each file's
original bytes go to `<file>.orig` (never over an existing one), the new bytes replace the file with
its mode and owner, and if that fails the backup goes too, so nothing stale is left.
"""

from __future__ import annotations

import ast
import hashlib
import io
import os
import stat
import tokenize
from dataclasses import dataclass
from pathlib import Path

from attnprof.errors import UserError
from attnprof.files import shown, write_atomic


class PatchRefused(UserError):
    """A source file cannot be patched safely; the message says why. Nothing was written."""


@dataclass(frozen=True)
class SourceFile:
    """A Python file as its bytes and as the text Python reads from them (line endings kept)."""

    file: str
    raw: bytes
    text: str
    encoding: str  # `utf-8-sig` when the file starts with a BOM, which encoding writes back

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()

    def lines(self) -> list[str]:
        """The lines as Python numbers them (`\\n`, `\\r\\n` or `\\r`, not the form feeds and other breaks
        str.splitlines also splits at), each with its ending."""
        return io.StringIO(self.text, newline="").readlines()

    def line(self, n: int) -> str:
        lines = self.lines()
        return lines[n - 1].strip() if 0 < n <= len(lines) else ""

    def offset(self, line: int, col: int) -> int:
        """Where (line, ast column in UTF-8 bytes) is in `text`."""
        lines = self.lines()
        before = sum(len(ln) for ln in lines[: line - 1])
        return before + len(lines[line - 1].encode()[:col].decode(errors="ignore"))


def read_source(file: str | Path) -> SourceFile:
    """The file as Python would read it; PatchRefused naming the file when it cannot be read."""
    try:
        raw = Path(file).read_bytes()
    except OSError as e:
        raise PatchRefused(f"{shown(str(file))}: cannot read it ({e.strerror or e})") from None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        return SourceFile(str(file), raw, raw.decode(encoding), encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as e:
        raise PatchRefused(f"{shown(str(file))}: not readable as Python source ({e})") from None


def file_digest(file: str | Path) -> str | None:
    """The SHA-256 of the file's bytes now, or None when it cannot be read."""
    try:
        return hashlib.sha256(Path(file).read_bytes()).hexdigest()
    except OSError:
        return None


def write(sources: dict[str, tuple[str, str]]) -> list[Path]:
    """Replace each file's text `old` by `new` ({file: (old, new)}), keeping its original bytes as
    `<file>.orig`; every file is checked before any is written. Returns the files written."""
    ready = [_ready(file, old, new) for file, (old, new) in sorted(sources.items())]
    for path, real, raw, new_raw in ready:
        _replace(path, real, raw, new_raw)
    return [path for path, *_ in ready]


def _ready(file: str, old: str, new: str) -> tuple[Path, Path, bytes, bytes]:
    """(the path, the file it names, its bytes, the new bytes), or PatchRefused with the reason."""
    path = Path(file)
    real = path.resolve()  # a symlink's target is what changes; the link stays
    source = read_source(real)
    if source.text != old:
        raise PatchRefused(f"{shown(file)} changed while attnprof was reading it: nothing written; run patch again")
    try:
        ast.parse(new)
        new_raw = new.encode(source.encoding)
    except SyntaxError as e:
        raise PatchRefused(f"{shown(file)}: the rewritten file would not parse ({e.msg}, line {e.lineno}): "
                           "nothing written") from None
    except UnicodeEncodeError as e:
        raise PatchRefused(f"{shown(file)}: the new text does not fit its {source.encoding} encoding ({e.reason})"
                           ": nothing written") from None
    backup = Path(f"{file}.orig")
    if backup.exists() or backup.is_symlink():
        raise PatchRefused(f"{shown(str(backup))} already exists: move it away first, it may be your only original")
    why = _why_not_writable(real, backup.parent)
    if why:
        raise PatchRefused(f"{shown(file)} {why}: not replaced")
    return path, real, source.raw, new_raw


def _why_not_writable(real: Path, backup_folder: Path) -> str | None:
    st = real.stat()
    if not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(real, os.W_OK):
        return "is read-only"  # the mode too: root may write anything, but a 0444 file says keep out
    for folder in dict.fromkeys((real.parent, backup_folder.resolve())):
        if not os.access(folder, os.W_OK | os.X_OK):
            return f"is in a folder attnprof cannot write to ({folder})"
    if st.st_nlink > 1:
        return f"has {st.st_nlink} hard links: a new file would split them"
    if os.geteuid() != 0 and (st.st_uid != os.geteuid() or st.st_gid not in (os.getegid(), *os.getgroups())):
        return "belongs to another user or group: a new file would change its owner"
    return None


def _replace(path: Path, real: Path, raw: bytes, new_raw: bytes) -> None:
    backup = Path(f"{path}.orig")
    try:
        write_atomic(backup, raw, like=real, exclusive=True)
    except FileExistsError:
        raise PatchRefused(f"{shown(str(backup))} already exists: move it away first") from None
    except OSError as e:
        raise PatchRefused(f"{shown(str(backup))}: cannot write the backup ({e.strerror}): nothing changed") from None
    try:
        write_atomic(real, new_raw, like=real)
    except BaseException as e:
        backup.unlink(missing_ok=True)  # the source is as it was: no backup of a change that did not happen
        if isinstance(e, OSError):
            raise PatchRefused(f"{shown(str(path))}: cannot write it ({e.strerror}): nothing changed") from None
        raise
