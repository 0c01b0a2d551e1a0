"""One trace model for every producer, on small traces written here in each producer's manner: ROCm's text
numbers and launch-side geometry, Kineto's 2021 categories, flows without correlation args; what cannot be
read is dropped and said, by field and event count. The real traces are read in test_real_corpus.py."""

from __future__ import annotations

import json

import pytest

from attnprof.analysis.attribution import analyze_trace
from attnprof.trace.reader import load, parse


def _write(tmp_path, events, name="t.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _step(launch_args, kernel_args, cats=("user_annotation", "cpu_op", "cuda_runtime", "kernel")):
    """A region, an op, a launch and its kernel, with the launch's and the kernel's args as given."""
    region, op, launch, kernel = cats
    return [{"ph": "X", "cat": region, "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
            {"ph": "X", "cat": op, "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 50},
            {"ph": "X", "cat": launch, "name": "hipLaunchKernel", "pid": 1, "tid": 1, "ts": 2.5, "dur": 5,
             "args": launch_args},
            {"ph": "X", "cat": kernel, "name": "add_kernel", "pid": 2, "tid": 7, "ts": 10.25, "dur": 3,
             "args": kernel_args}]


def test_numbers_written_as_text_are_read_as_numbers_on_the_fast_path(tmp_path):
    """roctracer's "0x0" streams and "2560" byte counts: no lenient read, nothing dropped."""
    events = _step({"correlation": 7, "stream": "0x1f", "bytes": "2560"}, {"correlation": 7, "stream": 0})
    trace = load(_write(tmp_path, events))
    launch = next(e for e in trace.events if e.cat == "cuda_runtime")
    assert (launch.args.stream, launch.args.bytes, trace.lenient, trace.warnings) == (31, 2560, False, ())


def test_a_field_that_is_no_number_is_dropped_and_counted_per_event(tmp_path):
    """Three launches share one set of args (read once): the warning counts the three events."""
    events = _step({"correlation": 7, "stream": "default"}, {"correlation": 7})
    events += [{**events[2], "ts": 3.5 + i} for i in range(2)]
    trace = load(_write(tmp_path, events))
    assert trace.warnings == ("dropped args field 'stream' of 3 event(s): not a value of the type attnprof reads "
                              "(e.g. 'default')",)
    assert analyze_trace(trace).forwards[0].activities[0].launch is not None  # the rest of the event is kept


def test_the_2021_schema_is_read_in_todays_categories(tmp_path):
    """Kineto 2021: Operator (ProfilerStep#N among them), Runtime, Kernel; streams as "stream 7" threads."""
    events = _step({"correlation": 7}, {"correlation": 7, "device": 0},
                   cats=("Operator", "Operator", "Runtime", "Kernel"))
    events[3]["tid"] = "stream 7"
    a = analyze_trace(load(_write(tmp_path, events)))
    assert {e.cat for e in a.trace.events} == {"cpu_op", "cuda_runtime", "kernel"}
    assert a.region == "ProfilerStep#*" and len(a.forwards[0].activities) == 1


@pytest.mark.parametrize(("lenient", "whole"), [(False, False), (True, False), (False, True)])
def test_flows_give_the_correlation_where_events_carry_none(tmp_path, lenient, whole):
    """A launch and a kernel linked only by an ac2g flow (s on the launch, f on the kernel, same id), on the
    fast path (a piece at a time, or the whole document held) and on the lenient one (an odd field elsewhere
    sends the piece there)."""
    events = _step({}, {"grid": [1, 1, 1]} if not lenient else {"grid": [1, 1, 1], "device": []})
    events += [{"ph": "s", "id": 7, "pid": 1, "tid": 1, "ts": 2.5, "cat": "ac2g", "name": "ac2g"},
               {"ph": "f", "id": 7, "pid": 2, "tid": 7, "ts": 10.25, "cat": "ac2g", "name": "ac2g", "bp": "e"},
               {"ph": "f", "id": 8, "pid": 2, "tid": 7, "ts": 99, "cat": "fwdbwd", "name": "fwdbwd"}]
    path = _write(tmp_path, events)
    trace = parse(path.read_bytes()) if whole else load(path)
    a = analyze_trace(trace)
    assert trace.lenient is lenient and (a.orphans, a.outside) == (0, 0) and len(a.forwards[0].activities) == 1


def test_a_kernel_is_given_the_geometry_its_launch_carries(tmp_path):
    """ROCm 6 writes grid and block on hipLaunchKernel; a kernel with its own keeps them."""
    events = _step({"correlation": 7, "grid": [512, 1, 1], "block": [256, 1, 1]}, {"correlation": 7, "device": 0})
    events += [{**events[2], "ts": 4, "args": {"correlation": 8, "grid": [9, 9, 9], "block": [9, 1, 1]}},
               {**events[3], "ts": 20, "args": {"correlation": 8, "grid": [2, 1, 1], "block": [64, 1, 1]}}]
    kernels = [e for e in load(_write(tmp_path, events)).events if e.cat == "kernel"]
    assert [(k.args.grid, k.args.block, k.args.device) for k in kernels] == [([512, 1, 1], [256, 1, 1], 0),
                                                                               ([2, 1, 1], [64, 1, 1], None)]
