"""Result files: written atomically (temporary file + rename) so an interrupted run never
leaves half a file, and one folder per run so two runs into the same --out never clobber."""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any


def write_atomic(path: Path, data: bytes | str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def new_run_dir(out: Path, stem: str) -> Path:
    """A fresh folder under `out` named by time and problem; never reuses an existing one."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    base = f"{time.strftime('%Y%m%d-%H%M%S')}_{stem}"
    for n in range(1000):
        candidate = out / (base if n == 0 else f"{base}-{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise RuntimeError(f"cannot create a new run folder under {out}")


def shown(file: str) -> str:
    """A path as the user would type it: relative inside the current folder."""
    path = Path(file)
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else file
