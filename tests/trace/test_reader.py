"""The trace loader: real traces on the fast path, msgspec's quirks, streaming, and bad input."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import msgspec
import pytest

from attnprof.trace import reader as trace
from attnprof.trace import source
from attnprof.trace.reader import Args, Event, TraceError, load, parse
from support import FIXTURES

REAL = sorted(p for p in FIXTURES.glob("*/*.json.gz") if p.parent.name != "bad")
BAD = FIXTURES / "bad"


def kineto(events: list, props: list | None = None, compact: bool = False) -> bytes:
    """A trace laid out as torch.profiler writes it (one event per line), or as compact JSON."""
    if compact:
        return json.dumps({"deviceProperties": props or [], "traceEvents": events}).encode()
    body = ",\n".join("  " + json.dumps(e) for e in events)
    props_json = json.dumps(props or [])
    head = f'{{\n  "schemaVersion": 1,\n  "deviceProperties": {props_json},\n  "traceEvents": [\n'
    return (head + body + '\n  ],\n  "traceName": "t"\n}\n').encode()


def x(name="op", cat="cpu_op", ts=0.0, dur=1.0, pid=1, tid=1, **args) -> dict:
    e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    return {**e, "args": args} if args else e


def fields(t: trace.Trace) -> list[tuple]:
    return [(e.name, e.cat, e.ph, e.ts, e.dur, e.pid, e.tid, msgspec.json.encode(e.args)) for e in t.events]


def write(tmp_path: Path, data: bytes, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return path


@pytest.fixture
def small_blocks(monkeypatch):
    """Read in 512-byte blocks, so that even a small trace is cut into many pieces."""
    monkeypatch.setattr(source, "_BLOCK", 512)


def no_whole_file_read(raw, source="?"):
    raise AssertionError("streaming gave up and read the file whole")


@pytest.mark.parametrize("path", REAL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_traces_decode_on_the_fast_path(path, small_blocks, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(trace, "parse", no_whole_file_read)
        t = load(path)
    raw = gzip.decompress(path.read_bytes())
    complete = [e for e in json.loads(raw)["traceEvents"] if e.get("ph") == "X"]
    assert not t.lenient and t.warnings == ()
    assert len(t.events) == len(complete) and all(e.ph == "X" for e in t.events)
    assert fields(t) == fields(parse(raw))  # streamed in pieces == decoded whole


def test_plain_json_reads_like_gzip(tmp_path):
    path = REAL[0]
    plain = write(tmp_path, gzip.decompress(path.read_bytes()))
    assert fields(load(plain)) == fields(load(path))


def test_compact_json_streams_too(tmp_path, small_blocks, monkeypatch):
    data = kineto([x(ts=i, correlation=i) for i in range(300)], compact=True)
    monkeypatch.setattr(trace, "parse", no_whole_file_read)
    assert len(load(write(tmp_path, data)).events) == 300


@pytest.mark.parametrize("after", [
    ',\n  "INFO": ["INFO: CuptiActivityProfiler.cpp:907] Enabling GPU tracing", "cpp:1141] Traces Recorded:"]',
    ',\n  "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}], "displayTimeUnit": "ms"',
], ids=["kineto_log_lines", "device_properties_after"])
def test_what_follows_the_events_array_does_not_send_the_file_whole(tmp_path, small_blocks, monkeypatch, after):
    """Kineto writes its log lines after the events (hta/ns in the real corpus), TraceLens its device list:
    a `]` there closes no events array, and the last piece still ends at the right one."""
    data = kineto([x(ts=i, correlation=i) for i in range(300)]).replace(b'\n  ],\n  "traceName"',
                                                                      b"\n  ]" + after.encode() + b',\n  "traceName"')
    whole = parse(data)
    monkeypatch.setattr(trace, "parse", no_whole_file_read)
    streamed = load(write(tmp_path, data))
    assert len(streamed.events) == 300 and fields(streamed) == fields(whole)


def test_msgspec_quirks_stay_on_the_fast_path(tmp_path):
    events = [
        x("ints", ts=5, dur=2),  # ints where floats are expected
        x("spans", pid="Spans", tid="PyTorch Profiler"),  # pid and tid as strings
        x("no args"),
        x("extra", correlation=7, **{"Ev Idx": 3, "Concrete Inputs": ["", "1"], "Record function id": 0}),
        x("dims", **{"Input Dims": [[4, 1024], [], None, [[1, 2], [3]]], "Input type": ["float", None, ""]}),
        {"ph": "i", "name": "instant", "ts": 1, "s": "t", "args": {"Bytes": 5}},
        {"ph": "s", "id": 1, "name": "flow", "ts": 1, "pid": 1, "tid": 1, "cat": "ac2g"},
        {"ph": "f", "id": 1, "name": "flow", "ts": 2, "pid": 1, "tid": 1, "cat": "ac2g", "bp": "e"},
        {"ph": "M", "name": "process_name", "pid": "Spans", "args": {"name": "x"}},
        {"ph": "B", "name": "begin", "ts": 1}, {"ph": "E", "ts": 2},
        {"ph": "C", "name": "c", "args": {"v": 1}},
    ]
    t = load(write(tmp_path, kineto(events)))
    assert not t.lenient and t.warnings == ()
    by = {e.name: e for e in t.events}
    assert list(by) == ["ints", "spans", "no args", "extra", "dims"]  # other phases dropped
    assert by["ints"].ts == 5.0 and isinstance(by["ints"].ts, float) and by["ints"].end == 7.0
    assert (by["spans"].pid, by["spans"].tid) == ("Spans", "PyTorch Profiler")
    assert by["no args"].args is None
    assert by["extra"].args.correlation == 7
    assert by["dims"].args.input_dims == [[4, 1024], [], None, [[1, 2], [3]]]
    assert by["dims"].args.input_type == ["float", None, ""]


def test_wrong_types_take_the_lenient_path_and_keep_the_event(tmp_path):
    t = load(write(tmp_path, kineto([x("a", correlation="nine", stream=3), x("b", ts="12.5")])))
    a, b = t.events
    assert t.lenient and t.warnings == ("dropped args field 'correlation' of 1 event(s): not a value of the type "
                                        "attnprof reads (e.g. 'nine')",)  # said, with the field and how many
    assert a.args.correlation is None and a.args.stream == 3  # the odd field goes, the rest stays
    assert b.ts == 12.5


def test_equal_values_are_shared(tmp_path):
    dims = {"Input Dims": [[8, 16, 1024, 64]], "Input type": ["c10::BFloat16"]}
    t = load(write(tmp_path, kineto([x("aten::mm", **dims), x("aten::mm", ts=2, **dims)])))
    a, b = t.events
    assert a.name is b.name and a.args.input_dims is b.args.input_dims
    assert isinstance(a, Event) and isinstance(a.args, Args)
    assert a.args.input_dims == [[8, 16, 1024, 64]]


@pytest.mark.parametrize("compact", [False, True], ids=["kineto", "compact"])
def test_cuts_never_change_what_is_read(tmp_path, small_blocks, compact):
    """Names and args full of the bytes a cut looks for; nested objects in args; events split
    across blocks: the streamed read equals the whole-file read."""
    tricky = ["a},{b", "}, {", "]", '"traceEvents": [', "},\n{", "{lambda()#1}", "ü∂ 中文"]
    events = [x(name, ts=i, nested=[{"a": {"b": [1]}}, {"c": "},{"}]) for i, name in enumerate(tricky * 20)]
    data = kineto(events, props=[{"name": "]}, {", "numSms": 132}], compact=compact)
    t = load(write(tmp_path, data))
    assert fields(t) == fields(parse(data)) and len(t.events) == len(events)
    assert t.device_properties == [{"name": "]}, {", "numSms": 132}]


@pytest.mark.parametrize("data", [
    b'{"traceEvents": []}', b'{"traceEvents": [ ] , "x": [1, 2]}', b"[]",
    b'{"deviceProperties": [{"a": [1]}], "other": {"k": "]"}, '
    b'"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}]}',
    b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}], "traceName": "a]b", "more": [[], {}]}',
])
def test_document_shapes(tmp_path, small_blocks, data):
    assert fields(load(write(tmp_path, data))) == fields(parse(data))


# file in tests/fixtures/bad -> what the user sees: an error saying this, or (events, warning)
BAD_CASES = {
    "empty.json": "file is empty",
    "not_json.json": "not JSON",
    "garbage.json": "not UTF-8 text",
    "not_utf8.json": "not UTF-8 text",
    "truncated.json": "looks truncated",
    "truncated.json.gz": "broken or truncated gzip",
    "not_gzip.json.gz": "named .gz but is not gzip data",
    "no_trace_events.json": "no 'traceEvents' list",
    "trace_events_not_list.json": "'traceEvents' is a dict, not a list",
    "deeply_nested.json.gz": "nested too deeply",
    "gzip_bomb.json.gz": "decompresses to more than --max-bytes",
    "nan_infinity.json": (3, "skipped 3 malformed event(s)"),
    "bad_fields.json": (4, "skipped 9 malformed event(s)",
                        "dropped args field 'Input Dims' of 1 event(s): not a value of the type attnprof reads "
                        "(e.g. '7')",
                        "dropped args field 'correlation' of 1 event(s): not a value of the type attnprof reads "
                        "(e.g. 'nine')"),
    "orphan_kernel.json": (5, None),
    "unknown_categories.json": (5, None),
    "bare_list.json": (3, None),
    "bare_list_unterminated.json": (3, None),
}


def test_every_bad_fixture_has_a_case():
    assert sorted(p.name for p in BAD.iterdir()) == sorted(BAD_CASES)


@pytest.mark.parametrize("name", sorted(BAD_CASES))
def test_bad_input(name):
    expected = BAD_CASES[name]
    if isinstance(expected, str):
        with pytest.raises(TraceError) as e:
            load(BAD / name, max_bytes=1 << 20)
        assert expected in str(e.value) and "\n" not in str(e.value) and len(str(e.value)) < 200
    else:
        t = load(BAD / name, max_bytes=1 << 20)
        assert len(t.events) == expected[0]
        assert t.warnings == tuple(w for w in expected[1:] if w)


def test_bad_fields_keep_the_good_parts():
    t = load(BAD / "bad_fields.json")
    odd = next(e for e in t.events if e.name == "args odd")
    assert odd.args.stream == 3 and odd.args.correlation is None and odd.args.input_dims is None


def test_missing_and_unreadable_paths(tmp_path):
    for path, says in [(tmp_path / "nope.json", "No such file"), (tmp_path, "cannot read")]:
        with pytest.raises(TraceError, match=says):
            load(path)


def test_size_caps(tmp_path):
    path = write(tmp_path, kineto([x(ts=i) for i in range(2000)]))
    with pytest.raises(TraceError, match="more than --max-bytes"):
        load(path, max_bytes=10_000)
    assert len(load(path, max_bytes=os.path.getsize(path)).events) == 2000


def test_the_default_cap_bounds_what_is_inflated_or_held_whole_not_a_plain_file(tmp_path, monkeypatch):
    # the default (4 GiB) made small: a plain file past it is still read in pieces; a gzip of it, and a file
    # that must be read whole (its events array opens past the head window), are refused, saying why
    monkeypatch.setattr(source, "DEFAULT_MAX_BYTES", 10_000)
    plain = write(tmp_path, kineto([x(ts=i) for i in range(2000)]))
    assert os.path.getsize(plain) > 10_000 and len(load(plain).events) == 2000
    gz = write(tmp_path, plain.read_bytes(), "t.json.gz")  # (gzipped by its name)
    with pytest.raises(TraceError, match=r"more than --max-bytes \(10000 bytes, the default for a gzip.*gunzip it"):
        load(gz)
    assert len(load(gz, max_bytes=os.path.getsize(plain)).events) == 2000  # a cap given is the cap
    late = b'{"pad": "' + b" " * (2 << 20) + b'", "traceEvents": [' + json.dumps(x()).encode() + b"]}"
    with pytest.raises(TraceError, match="what a pipe or a file read whole may hold"):
        load(write(tmp_path, late, "late.json"))


def test_parse_in_memory_errors():
    cases = [(b"", "empty"), (b"\x00\x01", "not"), (b'{"traceEvents": [1', "truncated"),
             (b"{}", "traceEvents")]
    for raw, says in cases:
        with pytest.raises(TraceError, match=says):
            parse(raw)


@pytest.mark.skipif(not os.environ.get("ATTNPROF_BIG_TRACE"), reason="set ATTNPROF_BIG_TRACE to a big trace")
def test_big_trace_streams_on_the_fast_path():
    t = load(os.environ["ATTNPROF_BIG_TRACE"])
    assert not t.lenient and t.warnings == () and len(t.events) > 10_000


def test_a_trace_of_only_malformed_events_is_an_error_however_it_is_cut(tmp_path, small_blocks):
    data = kineto([{"ph": "X", "name": "no times " * 40}, {"name": "no phase " * 40}])  # cut between the two
    for read in (lambda: load(write(tmp_path, data)), lambda: parse(data)):
        with pytest.raises(TraceError, match=r"no usable event in the trace \(2 of 2 malformed\)"):
            read()
