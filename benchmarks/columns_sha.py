"""A sha256 of everything the reader gives for each trace named (every column with its type, the names,
the tables, the arg sets, the counts and warnings), to show that a change to reading changed none of it:

    PYTHONPATH=$PWD/src python3 benchmarks/columns_sha.py /work/big/llama64.json tests/fixtures/h200/*.json.gz

A trace that cannot be read hashes its error's message.
"""

from __future__ import annotations

import hashlib
import sys

from attnprof.trace.reader import Trace, load
from attnprof.trace.source import TraceError

COLUMNS = ("ts", "dur", "cat", "name", "pid", "thread", "corr", "args")


def digest(trace: Trace) -> str:
    """The sha256 (16 hex digits) of the trace's columns, tables and what the reader said about it."""
    c, h = trace.columns, hashlib.sha256()
    for key in COLUMNS:
        column = getattr(c, key)
        h.update(key.encode() + str(column.dtype).encode() + column.tobytes())
    h.update(repr((c.cats, list(c.names), c.pids, c.threads, c.arg_sets)).encode())
    h.update(repr((trace.warnings, trace.lenient, trace.device_properties, trace.distributed_info,
                   trace.base_time_ns)).encode())
    return h.hexdigest()[:16]


def main(paths: list[str]) -> None:
    for path in paths:
        try:
            print(digest(load(path)), path)
        except TraceError as e:
            print("error", hashlib.sha256(str(e).encode()).hexdigest()[:16], path)


if __name__ == "__main__":
    main(sys.argv[1:])
