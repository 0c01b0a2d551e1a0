"""The reader's columns (trace.columns) hold exactly what the events hold, aligned with them; and the
synthetic big traces that benchmarks/engine/big_trace.py makes analyse as their template says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnprof.analysis.attribution import analyze_trace
from attnprof.trace import builder, wire
from attnprof.trace.columns import Columns
from attnprof.trace.reader import Args, Event, Trace, load
from support import CPU, H200

BIG_TRACE = Path(__file__).parents[2] / "benchmarks" / "engine" / "big_trace.py"
ARRAYS = ("ts", "dur", "cat", "name", "pid", "thread", "corr", "args")
TABLES = ("cats", "names", "pids", "threads", "arg_sets")


def test_the_columns_are_the_events_fields_with_each_value_coded_once():
    t = load(H200 / "train_4_16_1024_64_bf16_naive.json.gz")
    c = t.columns
    assert len(c) == len(t.events) > 100
    assert c.ts.tolist() == [e.ts for e in t.events] and c.dur.tolist() == [e.dur for e in t.events]
    assert [c.names[i] for i in c.name.tolist()] == [e.name for e in t.events]
    assert [c.cats[i] for i in c.cat.tolist()] == [e.cat for e in t.events]
    assert [c.threads[i] for i in c.thread.tolist()] == [(e.pid, e.tid) for e in t.events]
    assert len(set(c.names)) == len(c.names) and len(set(c.threads)) == len(c.threads)


def test_rows_make_the_events_and_the_args_are_columns_too():
    t = load(H200 / "train_4_16_1024_64_bf16_naive.json.gz")
    c, events = t.columns, list(t.events)
    assert [e.args.correlation if e.args else None for e in events] == [None if x < 0 else x for x in c.corr.tolist()]
    assert [e.args is None for e in events] == (c.args < 0).tolist()
    assert all(a.correlation is None for a in c.arg_sets) and len(c.arg_sets) < len(events) / 10
    rows = np.flatnonzero(c.corr >= 0)[::7]
    made = t.events_at(rows)
    assert made == [t.event(r) for r in rows.tolist()] == [events[r] for r in rows.tolist()]
    assert made[0].args is not t.event(int(rows[0])).args  # its own copy, holding its correlation
    assert t.events[-1] == events[-1] and t.events[2:5] == events[2:5] and len(t.events) == len(c)


def test_a_trace_made_from_a_list_gives_its_own_objects():
    events = [Event("k", "kernel", "X", 1.0, 2.0, 0, 7, Args(correlation=3, grid=[1, 1, 1])),
              Event("op", "cpu_op", "X", 0.0, 5.0, 1, 1)]
    t = Trace("t", events)
    assert t.events_at([1, 0])[0] is events[1] and t.event(0) is events[0]
    assert t.columns.corr.tolist() == [3, -1] and t.columns.args.tolist() == [0, -1]
    assert t.columns.arg_sets == [Args(grid=[1, 1, 1])] and events[0].args.correlation == 3  # not changed


def test_a_made_trace_repeats_its_templates_step_as_layers(tmp_path):
    out = tmp_path / "made.json"
    subprocess.run([sys.executable, str(BIG_TRACE), "--make", str(out), "--mb", "0.4", "--steps", "2"],
                   check=True, capture_output=True, timeout=120)
    template = analyze_trace(load(H200 / "train_4_16_1024_64_bf16_naive.json.gz"), "ProfilerStep#*")
    a = analyze_trace(load(out), "train_step")
    per_step = [len(f.activities) for f in a.forwards]
    assert len(per_step) == 2 and per_step[0] == per_step[1] > 0
    assert per_step[0] % len(template.forwards[1].activities) == 0  # whole copies of the middle step


def test_reading_keeps_columns_not_an_object_per_event(tmp_path):
    """What a loaded trace holds grows by the columns' bytes per event (44, at most twice that while they
    grow), not by an Event object's (~250 with its floats and args)."""
    import json
    import tracemalloc

    events = [{"ph": "X", "cat": "kernel" if i % 3 else "cpu_op", "name": f"op{i % 50}", "pid": 1, "tid": i % 4,
               "ts": float(i), "dur": 0.5, "args": {"correlation": i, "External id": i, "grid": [1, 2, 3]}}
              for i in range(60_000)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    del events
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        t = load(path)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(t.columns) == 60_000 and held < 100 * len(t.columns)


def test_a_null_or_missing_correlation_reads_as_none_and_equal_args_share_a_code(tmp_path):
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": i, "dur": 1, "args": args}
              for i, args in enumerate([{"correlation": 5, "grid": [1, 1, 1]}, {"correlation": None, "grid": [1, 1, 1]},
                                        {"grid": [1, 1, 1]}, {"correlation": 6}, {}])]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load(path)
    assert trace.columns.corr.tolist() == [5, -1, -1, 6, -1] and not trace.lenient
    assert trace.columns.args.tolist() == [0, 0, 0, 1, 1]
    assert [e.args for e in trace.events] == [Args(5, grid=[1, 1, 1]), Args(grid=[1, 1, 1]), Args(grid=[1, 1, 1]),
                                              Args(6), Args()]


@pytest.mark.parametrize("past_int32", [None, 7, 1999], ids=["none", "early", "last-batch"])
def test_the_correlation_column_is_int32_until_an_id_needs_more(past_int32):
    """Ids that fit int32 give an int32 column; one past it, in any batch, widens the whole column to int64
    with every id kept (the column is filled batch by batch)."""
    ids = [i * 3 for i in range(2000)]
    if past_int32 is not None:
        ids[past_int32] = 2**40 + past_int32
    events = [Event("k", "kernel", "X", float(i), 1.0, 0, 7, Args(c)) for i, c in enumerate(ids)]
    b = builder.ColumnBuilder()
    for i in range(0, len(events), 300):
        b.add(events[i:i + 300])
    corr = b.columns().corr
    assert corr.tolist() == ids and corr.dtype == (np.int32 if past_int32 is None else np.int64)


# names apart from the second batch on; from the 80th name on; from the first batch mostly of new keys on
@pytest.mark.parametrize(("names_in_keys", "mostly_new"), [(0, 2.0), (80, 2.0), (1 << 30, 0.2)])
def test_names_in_the_keys_or_apart_give_the_same_columns(names_in_keys, mostly_new, monkeypatch):
    """While names are few an event's key holds its name (one lookup); once they are many, or a batch is
    mostly new keys, names are coded apart in batches: where the builder switches never changes a column
    or a table."""
    events = list(load(CPU / "llama_train_eager.json.gz").events)  # shapes: several keys a name

    def built() -> tuple[Columns, bool]:
        b = builder.ColumnBuilder()
        for i in range(0, len(events), 97):
            b.add(events[i:i + 97])
        return b.columns(), not b._named_keys

    with monkeypatch.context() as m:
        m.setattr(builder, "NAMES_IN_KEYS", 1 << 30)
        m.setattr(builder, "MOSTLY_NEW", 2.0)  # never
        always, apart = built()
    assert not apart
    monkeypatch.setattr(builder, "NAMES_IN_KEYS", names_in_keys)
    monkeypatch.setattr(builder, "MOSTLY_NEW", mostly_new)
    monkeypatch.setattr(builder, "MANY_NEW", 0)
    monkeypatch.setattr(builder, "NAMES_CODED_AT_ONCE", 150)  # names apart are coded a few batches at a time
    switched, apart = built()
    assert apart and len(always.names) > 100 and len(always) == len(events)
    assert all(np.array_equal(getattr(always, k), getattr(switched, k)) for k in ARRAYS)
    assert all(getattr(always, k) == getattr(switched, k) for k in TABLES)


def test_the_decoded_structs_read_at_once_give_the_columns_of_their_events():
    """The builder reads a decoded struct's fields at once (its slots in declared order), so the reader's
    struct must declare them in the order the builder names them; and a read trace's columns are those of
    its events put in one by one."""
    assert wire.WireEvent.__struct_fields__ == builder.EVENT_FIELDS
    trace = load(H200 / "8_16_1024_64_bf16_naive_shapes.json.gz")
    made = builder.columns_of(list(trace.events))
    for key in ("ts", "dur", "cat", "name", "pid", "thread", "corr", "args"):
        assert getattr(made, key).tolist() == getattr(trace.columns, key).tolist(), key
    assert (made.cats, list(made.names), made.threads, made.arg_sets) == (
        trace.columns.cats, list(trace.columns.names), trace.columns.threads, trace.columns.arg_sets)
