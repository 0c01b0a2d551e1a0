"""A memory view per variant: the peak a call adds above what it starts with, and the ops holding it then."""

from __future__ import annotations

import pytest

from attnprof.analysis.memory_peak import peak


def _op(name, ts, dur):
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur}


def _mem(ts, size, total, addr):
    return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": ts,
            "args": {"Device Type": 0, "Bytes": size, "Total Allocated": total, "Addr": addr}}


def test_the_peak_is_above_the_start_and_held_by_the_ops_that_made_the_live_tensors():
    events = [{"ph": "X", "cat": "user_annotation", "name": "r", "ts": 0, "dur": 100},
              _op("aten::bmm", 10, 10), _op("aten::empty", 11, 1), _op("aten::softmax", 30, 10),
              _op("aten::div", 50, 5),
              _mem(11.5, 4096, 1000 + 4096, "a"),  # bmm's scores (through aten::empty: bmm holds them)
              _mem(31, 4096, 1000 + 8192, "b"),  # softmax's probabilities: the peak
              _mem(35, -4096, 1000 + 4096, "a"),  # the scores freed
              _mem(51, 1024, 1000 + 5120, "c")]
    found = peak(events, "r")
    assert found["peak_bytes"] == 8192 and found["at_start_bytes"] == 1000 and found["allocations"] == 3
    assert found["held_by"] == [{"op": "aten::bmm", "bytes": 4096, "allocations": 1},
                                {"op": "aten::softmax", "bytes": 4096, "allocations": 1}]


def test_a_trace_without_memory_events_has_no_view():
    assert peak([{"ph": "X", "cat": "user_annotation", "name": "r", "ts": 0, "dur": 1}], "r") is None


def test_a_cpu_call_measures_its_scores_as_what_holds_the_peak():
    torch = pytest.importorskip("torch")
    from attnprof.harness.memory_view import memory_view

    q = torch.randn(1, 2, 64, 32)

    def naive():
        return (q @ q.transpose(-1, -2)).softmax(-1) @ q

    found = memory_view(naive, "cpu")
    scores = 1 * 2 * 64 * 64 * 4  # [B, H, S, S] fp32
    held = {h["op"]: h["bytes"] for h in found["held_by"]}
    assert found["peak_bytes"] >= 2 * scores  # scores and probabilities live together
    assert held.get("aten::_softmax", held.get("aten::softmax")) == scores
