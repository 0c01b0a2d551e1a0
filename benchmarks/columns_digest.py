"""A digest of everything the reader makes of a trace (every column with its dtype, the names, the tables, the
args sets, the trace's warnings and fields), once per way of reading it, to show that a change to the reader
or the number of processes reading moved nothing:

    python benchmarks/columns_digest.py TRACE [--readers 1 2]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from attnprof.trace.reader import load  # noqa: E402

ARRAYS = ("ts", "dur", "cat", "name", "pid", "thread", "corr", "args")


def digest(path: Path, readers: int | None) -> str:
    trace = load(path, readers=readers)
    c, h = trace.columns, hashlib.sha256()
    for key in ARRAYS:
        column = getattr(c, key)
        h.update(str(column.dtype).encode())
        h.update(np.ascontiguousarray(column).tobytes())
    h.update("\0".join(c.names).encode("utf-8", "surrogatepass"))
    h.update(repr((c.cats, c.pids, c.threads, c.arg_sets, trace.warnings, trace.lenient, trace.device_properties,
                   trace.distributed_info, trace.base_time_ns)).encode())
    return f"{h.hexdigest()[:16]} ({len(c)} rows, {len(c.names)} names)"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("trace", type=Path)
    p.add_argument("--readers", type=int, nargs="*", default=[None],
                   help="processes reading (default: as load chooses)")
    args = p.parse_args()
    for readers in args.readers:
        print(f"readers {readers or 'default'}: {digest(args.trace, readers)}")


if __name__ == "__main__":
    main()
