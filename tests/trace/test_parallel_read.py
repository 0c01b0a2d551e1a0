"""A big plain trace read by several processes, one byte range each, gives exactly the columns, counts and
document one process gives, and any doubt about a range sends the file back to one process."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from attnprof.trace import builder, names, parallel, reader
from support import H200

ARRAYS = ("ts", "dur", "cat", "name", "pid", "thread", "corr", "args")
TABLES = ("cats", "names", "pids", "threads", "arg_sets")


@pytest.fixture
def tiny_ranges(monkeypatch):
    """Every file counts as big, and each process takes 20 kB of it."""
    monkeypatch.setattr(parallel, "MIN_BYTES", 1)
    monkeypatch.setattr(parallel, "PART_BYTES", 20_000)
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda pid: range(4))


def read_both(path, monkeypatch) -> tuple[reader.Trace, reader.Trace, list]:
    """(read in ranges, read in one process, what read_ranges returned each time it was asked)."""
    got, real = [], parallel.read_ranges
    monkeypatch.setattr(parallel, "read_ranges", lambda *a: got.append(real(*a)) or got[-1])
    ranged = reader.load(path)
    with monkeypatch.context() as m:
        m.setattr(parallel, "MIN_BYTES", 1 << 60)
        whole = reader.load(path)
    return ranged, whole, got


def same(a: reader.Trace, b: reader.Trace) -> bool:
    ca, cb = a.columns, b.columns
    return (all(np.array_equal(getattr(ca, k), getattr(cb, k)) for k in ARRAYS)
            and all(getattr(ca, k) == getattr(cb, k) for k in TABLES)
            and (a.warnings, a.lenient, a.device_properties, a.distributed_info, a.base_time_ns)
            == (b.warnings, b.lenient, b.device_properties, b.distributed_info, b.base_time_ns))


def test_ranges_read_what_one_process_reads(tmp_path, tiny_ranges, monkeypatch):
    path = tmp_path / "t.json"
    path.write_bytes(gzip.decompress((H200 / "train_4_16_1024_64_bf16_naive.json.gz").read_bytes()))
    ranged, whole, got = read_both(path, monkeypatch)
    assert got and got[0] is not None  # it did read in ranges
    assert parallel.processes_for(path, path.stat().st_size) == 4 and len(whole.columns) > 400
    assert same(ranged, whole)


def test_odd_fields_and_a_guess_inside_a_string(tmp_path, tiny_ranges, monkeypatch):
    """Lenient pieces count alike in ranges; a name full of `},{` makes some guess fail: one process then."""
    events = [{"ph": "X", "cat": "cpu_op", "name": "x" * 50, "pid": 1, "tid": 1, "ts": i, "dur": 1,
               "args": {"correlation": "odd" if i % 97 == 0 else i}} for i in range(3000)]
    events[1500]["name"] = '}, {"ph": "X"' * 3000  # a long string of cut-like bytes in the middle
    events[10].pop("dur")
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [\n' + ",\n".join(map(json.dumps, events)) + '\n], "x": 1}')
    ranged, whole, got = read_both(path, monkeypatch)
    assert got and same(ranged, whole) and whole.lenient and ranged.warnings == whole.warnings
    assert whole.warnings == ("skipped 1 malformed event(s)", "dropped args field 'correlation' of 31 event(s): not "
                              "a value of the type attnprof reads (e.g. 'odd')")  # i = 0, 97, ..., 2910


def test_ranges_of_many_names_merge_as_one_process_codes_them(tmp_path, tiny_ranges, monkeypatch):
    """Names enough in every range for its table to find them by hash (taken in as bytes and hashes), some
    of them unique, some in every range, some not ASCII: the same table and codes as one process's."""
    monkeypatch.setattr(names, "FEW", 16)
    monkeypatch.setattr(builder, "RECODED_AT_ONCE", 7)  # another range's codes turned into ours in steps
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i % 40 if i % 3 else i}" + ("ü" if i % 7 == 0 else ""),
               "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(4000)]
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [\n' + ",\n".join(map(json.dumps, events)) + "\n]}")
    ranged, whole, got = read_both(path, monkeypatch)
    assert got and got[0] is not None and len(whole.columns.names) > 1000 and same(ranged, whole)


@pytest.mark.parametrize("wide_at", [10, 2990], ids=["first-range", "last-range"])
def test_a_correlation_past_int32_in_one_range_widens_the_merged_column(tmp_path, tiny_ranges, monkeypatch, wide_at):
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 1, "ts": i, "dur": 1,
               "args": {"correlation": 2**40 if i == wide_at else i}} for i in range(3000)]
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [\n' + ",\n".join(map(json.dumps, events)) + "\n]}")
    ranged, whole, got = read_both(path, monkeypatch)
    assert got and got[0] is not None and same(ranged, whole)
    assert ranged.columns.corr.dtype == whole.columns.corr.dtype == np.int64 and ranged.columns.corr[wide_at] == 2**40


def test_a_pool_worker_reads_in_one_process(tmp_path, tiny_ranges):
    """The ranks' pool runs each trace in a daemonic worker, which may not fork: it reads the file itself."""
    import multiprocessing

    path = tmp_path / "t.json"
    path.write_bytes(gzip.decompress((H200 / "train_4_16_1024_64_bf16_naive.json.gz").read_bytes()))
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(_events_read, (str(path),)) == len(reader.load(path).columns)


def _events_read(path: str) -> int:
    return len(reader.load(path).columns)


def test_readers_asked_for_bound_the_processes(tmp_path, tiny_ranges, monkeypatch):
    """`readers=1` (`analyze --workers 1`) reads a big file in this process; a higher number caps the cores."""
    path = tmp_path / "t.json"
    path.write_bytes(gzip.decompress((H200 / "train_4_16_1024_64_bf16_naive.json.gz").read_bytes()))
    size = path.stat().st_size
    assert (parallel.processes_for(path, size, 1), parallel.processes_for(path, size, 2),
            parallel.processes_for(path, size)) == (1, 2, 4)
    asked = []
    monkeypatch.setattr(parallel, "read_ranges", lambda *a: asked.append(a[2]))
    one = reader.load(path, readers=1)
    assert asked == [] and len(one.columns) > 400
    reader.load(path, readers=3)
    assert asked == [3]  # (the stub read nothing: then one process read the file)


def test_a_file_of_mostly_unique_names_is_read_in_one_process_until_it_is_very_big(tmp_path, tiny_ranges,
                                                                                   monkeypatch):
    """Merging a second range's names costs more than its process saves when most names are unique."""
    def trace(name_of) -> tuple:  # (a file of events named name_of(i), its size)
        events = [{"ph": "X", "cat": "cpu_op", "name": name_of(i), "pid": 1, "tid": 1, "ts": i, "dur": 1}
                  for i in range(3000)]
        path = tmp_path / "t.json"
        path.write_text('{"traceEvents": [\n' + ",\n".join(map(json.dumps, events)) + "\n]}")
        return path, path.stat().st_size
    assert parallel.processes_for(*trace(lambda i: f"op{i % 3 or i}")) == 4  # a third unique
    unique = trace(lambda i: f"op{i}")
    assert parallel.processes_for(*unique) == 1
    monkeypatch.setattr(parallel, "MANY_NAMES_MIN_BYTES", 1)
    assert parallel.processes_for(*unique) == 4


@pytest.mark.parametrize("given, asked", [([], None), (["--workers", "1"], 1)], ids=["default", "one"])
def test_analyze_workers_is_the_readers_of_one_trace(tmp_path, monkeypatch, capsys, given, asked):
    from attnprof.cli import main

    seen = []
    monkeypatch.setattr(parallel, "processes_for", lambda path, size, readers: seen.append(readers) or 1)
    path = tmp_path / "t.json"
    path.write_bytes(gzip.decompress((H200 / "train_4_16_1024_64_bf16_naive.json.gz").read_bytes()))
    assert main(["analyze", *given, "--json", str(path)]) == 0
    assert seen == [asked] and json.loads(capsys.readouterr().out)["per_forward"]


def test_flows_and_launch_geometry_merge_across_ranges(tmp_path, tiny_ranges, monkeypatch):
    """Launches and kernels linked only by ac2g flows, the grid on the launch (ROCm 6): each range's flows and
    threads taken into one table, so every kernel finds its launch's id and geometry, as in one process."""
    events = []
    for i in range(600):
        ts = 10.0 * i
        events += [{"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 1, "tid": 1 + i % 3,
                    "ts": ts, "dur": 2, "args": {"grid": [i + 1, 1, 1], "block": [64, 1, 1]}},
                   {"ph": "s", "id": i + 1, "pid": 1, "tid": 1 + i % 3, "ts": ts, "cat": "ac2g", "name": "ac2g"},
                   {"ph": "X", "cat": "kernel", "name": f"k{i % 7}", "pid": 2, "tid": 7, "ts": ts + 5, "dur": 1,
                    "args": {"device": 0}},
                   {"ph": "f", "id": i + 1, "pid": 2, "tid": 7, "ts": ts + 5, "cat": "ac2g", "name": "ac2g",
                    "bp": "e"}]
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [\n' + ",\n".join(map(json.dumps, events)) + "\n]}")
    ranged, whole, got = read_both(path, monkeypatch)
    assert got and got[0] is not None and same(ranged, whole)
    kernels = [e for e in ranged.events if e.cat == "kernel"]
    assert [(k.args.correlation, k.args.grid[0]) for k in kernels] == [(i + 1, i + 1) for i in range(600)]
