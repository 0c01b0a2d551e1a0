"""Hostile and odd trace inputs: pipes, a pipe nobody writes, gzip inside gzip, traces with no usable event.

Each either reads like the plain file or fails in one line with exit 2; none hangs."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from attnprof.trace import source
from attnprof.trace.reader import TraceError, load
from support import assert_one_line_error, attnprof, cpu_trace

NAIVE = cpu_trace("naive")


def events(trace) -> list[tuple]:
    return [(e.name, e.cat, e.ts, e.dur) for e in trace.events]


@pytest.mark.parametrize("body", [
    b'["a", "b", "c"]',
    b'{"traceEvents": ["x", 1, null]}',
    b'{"traceEvents": [{"ph": "X", "name": "no times"}, {"ph": "X", "ts": "soon", "dur": 1}]}',
    b'{"traceEvents": [{"cat": "kernel", "ts": "x", "dur": null, "args": 3, "name": 7}]}',  # no phase, bad types
    b'{"traceEvents": [{"cat": "kernel", "ts": 1, "dur": 2, "name": "k"}]}',  # well typed but no phase
])
def test_a_trace_without_one_usable_event_is_an_error(tmp_path, body):
    path = tmp_path / "t.json"
    path.write_bytes(body)
    with pytest.raises(TraceError, match="no usable event"):
        load(path)
    assert_one_line_error(attnprof("analyze", str(path)), "no usable event", str(path))


def test_events_of_other_phases_are_not_malformed(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "i", "name": "mark", "ts": 1}, '
                     b'{"ph": "X", "name": "op", "ts": 1, "dur": 2}]}')
    trace = load(path)
    assert [e.name for e in trace.events] == ["op"] and trace.warnings == ()


def test_an_empty_event_list_still_loads(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": []}')
    assert load(path).events == []


def test_gzip_inside_gzip_says_so(tmp_path):
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(NAIVE.read_bytes()))
    with pytest.raises(TraceError, match="gzip inside a gzip"):
        load(path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_named_pipe_reads_like_the_file(tmp_path):
    fifo = tmp_path / "trace.pipe"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "wb") as f:
            f.write(NAIVE.read_bytes())

    writer = threading.Thread(target=write)
    writer.start()
    piped = load(fifo)
    writer.join()
    assert events(piped) == events(load(NAIVE))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_pipe_past_the_default_cap_is_refused(tmp_path, monkeypatch):
    # a pipe is held whole, so the default cap (made small here) bounds it, as it does a gzip's inflation
    data = gzip.decompress(NAIVE.read_bytes())[:60_000]  # less than a pipe's buffer: written without waiting
    monkeypatch.setattr(source, "DEFAULT_MAX_BYTES", 10_000)
    fifo = tmp_path / "big.pipe"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "wb") as f, contextlib.suppress(BrokenPipeError):  # the reader may stop first
            f.write(data)

    writer = threading.Thread(target=write)
    writer.start()
    with pytest.raises(TraceError, match=r"is more than --max-bytes \(10000 bytes, what a pipe"):
        load(fifo)
    writer.join()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_named_pipe_nobody_writes_fails_instead_of_hanging(tmp_path, monkeypatch):
    fifo = tmp_path / "nobody.pipe"
    os.mkfifo(fifo)
    monkeypatch.setattr(source, "PIPE_WAIT_S", 0.2)
    start = time.monotonic()
    with pytest.raises(TraceError, match="nothing wrote to"):
        load(fifo)
    assert time.monotonic() - start < 5


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_the_cli_on_a_pipe_nobody_writes_exits_2_in_one_line(tmp_path):
    fifo = tmp_path / "nobody.pipe"
    os.mkfifo(fifo)
    env = {**os.environ, "ATTNPROF_PIPE_WAIT_S": "0.5"}
    proc = subprocess.run([sys.executable, "-m", "attnprof", "analyze", str(fifo)], capture_output=True, text=True,
                          timeout=60, env=env)
    assert_one_line_error(proc, "nothing wrote to")


def test_a_trace_on_stdin_reads_like_the_file():
    raw = gzip.decompress(NAIVE.read_bytes())
    proc = subprocess.run([sys.executable, "-m", "attnprof", "analyze", "/dev/stdin", "--json"], input=raw,
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    piped = json.loads(proc.stdout)
    plain = json.loads(attnprof("analyze", str(NAIVE), "--json").stdout)
    assert piped["per_forward"] == plain["per_forward"] and piped["forwards"] == plain["forwards"] == 3


def test_a_gzipped_trace_on_stdin_reads_too():
    proc = subprocess.run([sys.executable, "-m", "attnprof", "analyze", "/dev/stdin", "--json"],
                          input=NAIVE.read_bytes(), capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["forwards"] == 3


def test_a_lone_surrogate_in_an_event_drops_that_event_and_never_escapes_as_a_unicode_error():
    """Found by the fuzz test: `"\\ud800"` is valid JSON but no UTF-8 string, and no number."""
    from attnprof.trace.reader import TraceError, parse

    bad = {"ph": "X", "cat": "cpu_op", "tid": 0, "dur": 0.0, "args": {"Input Dims": 0}, "ts": "\ud800", "name": "x"}
    good = {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 0, "ts": 1.0, "dur": 2.0, "name": "aten::mm"}
    assert [e.name for e in parse(json.dumps({"traceEvents": [bad, good]}).encode()).events] == ["aten::mm"]
    with pytest.raises(TraceError):
        parse(json.dumps({"traceEvents": [bad]}).encode())


def test_a_flow_event_with_a_lone_surrogate_is_dropped_and_the_kernel_kept():
    """"\\ud800" is valid JSON; converting the flow that holds it raised UnicodeEncodeError out of the lenient
    reader (found by test_reader_fuzz). Now the flow is counted lost and the rest of the trace read."""
    from attnprof.trace.reader import parse

    kernel = {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": 0, "tid": 0,
              "args": {"correlation": 1}}
    flow = {"ph": "s", "id": "\ud800", "ts": 1, "pid": 0, "tid": 0, "cat": "ac2g", "name": "x"}
    trace = parse(json.dumps({"traceEvents": [kernel, flow, {"ph": 3}]}).encode())
    assert [e.name for e in trace.events] == ["k"]
