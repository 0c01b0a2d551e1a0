"""The reader keeps what several traces need to be read together: `distributedInfo` and `baseTimeNanoseconds`,
on the streaming path and the whole-file path alike."""

from __future__ import annotations

import gzip
import json

from attnprof.trace.reader import load, parse

INFO = {"backend": "nccl", "rank": 1, "world_size": 2, "pg_count": 1}
EVENT = {"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0, "dur": 2.0, "pid": 0, "tid": 7}


def _doc(**extra) -> dict:
    return {"schemaVersion": 1, "traceEvents": [EVENT] * 3, **extra}


def test_distributed_info_and_base_time_are_read_from_a_file_and_from_memory(tmp_path):
    doc = _doc(distributedInfo=INFO, baseTimeNanoseconds=1_790_857_026_000_000_000)
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    for trace in (load(path), parse(json.dumps(doc).encode())):
        assert trace.distributed_info == INFO
        assert trace.base_time_ns == 1_790_857_026_000_000_000
        assert len(trace.events) == 3


def test_a_trace_of_one_process_has_neither():
    trace = parse(json.dumps(_doc()).encode())
    assert trace.distributed_info is None and trace.base_time_ns is None


def test_values_of_the_wrong_type_are_dropped_not_trusted(tmp_path):
    doc = _doc(distributedInfo=["rank", 0], baseTimeNanoseconds="soon")
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    for trace in (load(path), parse(json.dumps(doc).encode())):
        assert trace.distributed_info is None and trace.base_time_ns is None
