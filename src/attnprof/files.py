"""Result files: written atomically (temporary file + rename) so an interrupted run never
leaves half a file, and one folder per run so two runs into the same --out never clobber.

Files get the permissions any program's new files get (0666 less the umask), not the temporary
file's 0600; a file written over an existing one keeps that one's mode and owner. A failure names
the path the user asked for (an OSError with that `filename`), never the temporary file."""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from attnprof.errors import UserError


def umask() -> int:
    """The process's umask, read without changing it where the OS tells (Linux), else set and restored."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, data: bytes | str, *, like: Path | None = None, exclusive: bool = False) -> None:
    """Write `data` to `path` whole or not at all. `like`: an existing file whose mode and owner the new
    one takes (a rewritten source); `exclusive`: never replace an existing `path` (FileExistsError)."""
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    if _special(path):  # /dev/null, /dev/stdout, a pipe: written to, never replaced by a file
        return _write_through(path, raw)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise _named(e, path) from None
    try:
        with os.fdopen(fd, "wb") as f:
            _take_mode(f.fileno(), like)
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            os.link(tmp, path)  # fails if `path` exists, even if it appeared a moment ago
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise _named(e, path) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _special(path: Path) -> bool:
    try:
        return not stat.S_ISREG(os.stat(path).st_mode) and not stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        return False


def _write_through(path: Path, raw: bytes) -> None:
    try:
        with open(path, "wb") as f:
            f.write(raw)
    except OSError as e:
        raise _named(e, path) from None


def _take_mode(fd: int, like: Path | None) -> None:
    if like is None:
        os.fchmod(fd, 0o666 & ~umask())
        return
    st = os.stat(like)
    os.fchmod(fd, stat.S_IMODE(st.st_mode))
    if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
        os.fchown(fd, st.st_uid, st.st_gid)  # PermissionError when it cannot be kept: not replaced then


def _named(e: OSError, path: Path) -> OSError:
    """The same error, naming the file the user asked for."""
    return type(e)(e.errno, e.strerror or str(e), str(path))


def finite(obj: Any) -> Any:
    """JSON has no NaN or Infinity: such a measurement is written as null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def write_json_atomic(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(finite(obj), indent=2, default=str) + "\n")


def append_jsonl(path: Path, obj: Any) -> None:
    """One complete line per call, flushed and synced: a SIGINT can only lose the line being built."""
    line = json.dumps(finite(obj), default=str) + "\n"
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise _named(e, Path(path)) from None


def new_run_dir(out: Path, stem: str) -> Path:
    """A fresh folder under `out` named by time and problem; never reuses an existing one."""
    out = Path(out)
    try:
        if out.exists() and not out.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "exists and is not a folder", str(out))
        out.mkdir(parents=True, exist_ok=True)
        base = f"{time.strftime('%Y%m%d-%H%M%S')}_{stem}"
        for n in range(1000):
            candidate = out / (base if n == 0 else f"{base}-{n}")
            try:
                candidate.mkdir()
                return candidate
            except FileExistsError:
                continue
    except OSError as e:
        raise _named(e, out) from None
    raise FileExistsError(errno.EEXIST, "a thousand run folders of this second exist already", str(out))


def not_an_input(output: str | Path, inputs: str | Path | Iterable[str | Path]) -> None:
    """Refuse an output path that is one of the command's inputs, or a file in an input folder
    (`analyze t.json --html t.json` would replace the trace it reads)."""
    out = Path(output).resolve()
    for given in [inputs] if isinstance(inputs, (str, Path)) else inputs:
        item = Path(given).resolve()
        if out == item or (item.is_dir() and out.parent == item and out.is_file()):
            raise UserError(f"{output}: that is an input of this command ({given}); write to another file")


def shown(file: str) -> str:
    """A path as the user would type it: relative inside the current folder."""
    path = Path(file)
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else file
