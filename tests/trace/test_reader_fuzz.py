"""Property tests: whatever the bytes, the loader returns a Trace or raises TraceError, and the
streamed read agrees with the whole-file read; attribution equals how a trace was built."""

from __future__ import annotations

import gzip
import json
import os
import tempfile

import msgspec
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnprof.analysis.attribution import OpIndex, analyze_trace
from attnprof.analysis.join import regions_of
from attnprof.trace import reader as trace
from attnprof.trace import source
from attnprof.trace.reader import Event, TraceError, load, parse
from support import FIXTURES

EXAMPLES = int(os.environ.get("ATTNPROF_FUZZ_EXAMPLES", "100"))  # raise it for a deeper search
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SMALL = FIXTURES / "cpu" / "1_2_64_32_bf16_sdpa-flash.json.gz"
SMALL_RAW = gzip.decompress(SMALL.read_bytes())

scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=6)
           | st.sampled_from(["X", "},{", "]", '"traceEvents": [', "\ud800"]))
keys = st.text(max_size=4) | st.sampled_from(["traceEvents", "deviceProperties", "ph"])
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(keys, inner, max_size=3), max_leaves=12)
arg_keys = st.sampled_from(["correlation", "External id", "Input Dims", "Input type", "grid", "block", "x"])
event_fields = {
    "ph": st.sampled_from(["X", "X", "X", "i", "f", "M"]) | scalars,
    "cat": st.sampled_from(["cpu_op", "kernel", "cuda_runtime", "user_annotation", "?"]) | scalars,
    "name": st.text(max_size=8) | scalars,
    "ts": st.floats(0, 1e6) | st.integers(0, 10**6) | scalars,
    "dur": st.floats(0, 1e3) | scalars,
    "pid": st.integers(0, 3) | st.text(max_size=3) | scalars,
    "tid": st.integers(0, 3) | scalars,
    "args": st.dictionaries(arg_keys, st.integers(0, 9) | values, max_size=3) | values,
}
events = st.fixed_dictionaries({}, optional=event_fields) | values
documents = (st.lists(events, max_size=6).map(lambda evs: {"deviceProperties": [{"n": 1}], "traceEvents": evs})
             | st.lists(events, max_size=6) | values)


def serialize(doc, layout: str) -> bytes:
    if layout == "kineto" and isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        body = ",\n".join("  " + json.dumps(e) for e in doc["traceEvents"])
        return ('{"deviceProperties": [],\n  "traceEvents": [\n' + body + "\n  ]\n}").encode()
    return json.dumps(doc, indent=1 if layout == "indented" else None).encode()


def outcome(read, *args):
    """What a reader gives: the error class, or the events, warnings and device properties."""
    try:
        t = read(*args)
    except TraceError as e:
        assert "\n" not in str(e)
        return TraceError
    fields = [(e.name, e.cat, e.ts, e.dur, e.pid, e.tid, e.args and msgspec.structs.asdict(e.args))
              for e in t.events]
    return repr(fields), t.warnings, t.device_properties  # repr: NaN equals itself there


def streamed(data: bytes, gz: bool = False):
    """`load` of `data` as a file, read in 64-byte blocks so that it is cut into many pieces."""
    fd, name = tempfile.mkstemp(suffix=".json.gz" if gz else ".json")
    with os.fdopen(fd, "wb") as f:
        f.write(gzip.compress(data) if gz else data)
    old, source._BLOCK = source._BLOCK, 64
    try:
        return outcome(load, name)
    finally:
        source._BLOCK = old
        os.unlink(name)


@FUZZ
@given(st.binary(max_size=300) | st.sampled_from([b"{", b"[", b'{"traceEvents": [', b"\x1f\x8b\x08"]))
def test_random_bytes(data):
    assert streamed(data) == outcome(parse, data)


@FUZZ
@given(documents, st.sampled_from(["kineto", "compact", "indented"]), st.booleans())
def test_random_documents(doc, layout, gz):
    data = serialize(doc, layout)
    assert streamed(data, gz) == outcome(parse, data)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.data())
def test_mutated_real_trace(data):
    raw = bytearray(SMALL_RAW)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(raw)))
        cut = data.draw(st.integers(0, 40))
        splice = st.binary(max_size=8) | st.sampled_from([b"", b"},{", b"]", b"NaN", b'"'])
        raw[at:at + cut] = data.draw(splice)
    if data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    assert streamed(bytes(raw)) == outcome(parse, bytes(raw))


def ev(name, cat, ts, dur, pid=1, tid=1, corr=None) -> dict:
    e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    return {**e, "args": {"correlation": corr}} if corr is not None else e


@st.composite
def built_traces(draw):
    """Regions back to back, launches inside them or outside all, kernels that run late
    (often in a later region's time) and orphans, in shuffled file order."""
    events, expected, corr, t = [], [], 0, 0
    for _ in range(draw(st.integers(1, 5))):
        dur = draw(st.integers(10, 1000))
        events.append(ev("fwd", "user_annotation", t, dur))
        events.append(ev("fwd", "user_annotation", t, dur, pid=2))  # another process: never matches
        expected.append(draw(st.integers(0, 6)))
        for _ in range(expected[-1]):
            corr += 1
            at = t + draw(st.integers(0, dur - 1))
            late = draw(st.integers(0, 5000))
            cat = draw(st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset"]))
            events += [ev("launch", "cuda_runtime", at, 1, corr=corr), ev("k", cat, at + late, 2, 0, 7, corr)]
        t += dur + draw(st.integers(0, 50))
    outside = draw(st.integers(0, 4))
    for i in range(outside):
        corr += 1
        events += [ev("launch", "cuda_driver", t + 10 + i, 1, corr=corr),
                   ev("k", "kernel", t + 20, 2, 0, 7, corr)]
    orphans = draw(st.integers(0, 3))
    events += [ev("lost", "kernel", 5, 1, 0, 7, corr=-1 - i) for i in range(orphans)]
    return draw(st.permutations(events)), expected, outside, orphans


@settings(max_examples=EXAMPLES, deadline=None)
@given(built_traces(), st.sampled_from(["kineto", "compact"]))
def test_attribution_equals_the_construction(built, layout):
    events, expected, outside, orphans = built
    fd, name = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "wb") as f:
        f.write(serialize({"traceEvents": events}, layout))
    try:
        a = analyze_trace(load(name), "fwd")
    finally:
        os.unlink(name)
    host = [f for f in a.forwards if f.region.pid == 1]
    assert [len(f.activities) for f in host] == expected
    assert all(not f.activities for f in a.forwards if f.region.pid == 2)
    assert (a.outside, a.orphans) == (outside, orphans)
    joined = [act for f in host for act in f.activities]
    assert all(act.launch.args.correlation == act.event.args.correlation for act in joined)


spans = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 30), st.integers(1, 2)), max_size=25)


@settings(max_examples=2 * EXAMPLES, deadline=None)
@given(spans, spans)
def test_chain_and_region_lookup_equal_brute_force(op_spans, probe_spans):
    """Any intervals, nested or overlapping: the nesting links give what a full scan gives."""
    ops = [Event(f"op{i}", "cpu_op", "X", ts, dur, 1, tid) for i, (ts, dur, tid) in enumerate(op_spans)]
    probes = [Event("p", "cuda_runtime", "X", ts, dur, 1, tid) for ts, dur, tid in probe_spans]
    index = OpIndex(ops)
    for p in probes + ops:
        want = sorted((o for o in ops if o.tid == p.tid and o is not p and o.ts <= p.ts
                       and p.ts + p.dur <= o.ts + o.dur + 1e-3), key=lambda o: (o.ts, -o.dur))
        assert index.chain(p) == want
    regions = [Event("r", "user_annotation", "X", ts, dur, tid, 1) for ts, dur, tid in op_spans]  # pid = tid
    a = analyze_trace(trace.Trace("t", regions), "r")
    for p in probes:
        p.pid = p.tid
    found = regions_of([f.region for f in a.forwards], trace.Trace("p", probes).columns, np.arange(len(probes)))
    for p, at in zip(probes, found.tolist(), strict=True):  # the lookup itself, against its definition
        holding = [i for i, f in enumerate(a.forwards)
                   if f.region.pid == p.pid and f.region.ts <= p.ts <= f.region.ts + f.region.dur]
        assert at == (max(holding, key=lambda i: (a.forwards[i].region.ts, i)) if holding else -1)
