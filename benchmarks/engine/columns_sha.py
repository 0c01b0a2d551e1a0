"""A sha256 of everything the reader gives for each trace named (every column with its type, the names,
the tables, the arg sets, the counts and warnings), to show that a change to reading changed none of it:

    PYTHONPATH=$PWD/src python3 benchmarks/engine/columns_sha.py /work/big/llama64.json tests/fixtures/h200/*.json.gz
    # one process, two:
    PYTHONPATH=$PWD/src python3 benchmarks/engine/columns_sha.py --readers 1,2 /work/big/llama64.json

A trace that cannot be read hashes its error's message. `--readers N,M` reads each trace once per number (processes
reading a big file at once; default: as load chooses).
"""

from __future__ import annotations

import argparse
import hashlib

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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("traces", nargs="+")
    p.add_argument("--readers", type=lambda v: [int(n) for n in v.split(",")], default=[None],
                   help="N,M,...: read each trace once with each number of processes")
    args = p.parse_args()
    for path in args.traces:
        for readers in args.readers:
            try:
                found = digest(load(path, readers=readers))
            except TraceError as e:
                found = "error " + hashlib.sha256(str(e).encode()).hexdigest()[:16]
            print(found, path, *([] if readers is None else [f"readers {readers}"]))


if __name__ == "__main__":
    main()
