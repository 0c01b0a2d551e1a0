"""A forward's GPU activities as rows: made on demand, one object per activity, and the columns the rules
read agree with the activities themselves (and with those of a forward made from events, as lint makes)."""

from __future__ import annotations

import numpy as np
import pytest

from attnprof.analysis.activities import KINDS, ActivityRows, columns_of_events, first_seen_groups
from attnprof.analysis.attribution import Forward, analyze_trace
from attnprof.trace.reader import load
from support import FIXTURES

GPU_TRACES = sorted(FIXTURES.glob("h200*/*.json.gz"))[:6]


@pytest.mark.parametrize("path", GPU_TRACES, ids=lambda p: p.name)
def test_columns_match_the_activities(path):
    a = analyze_trace(load(path))
    fwd = next(f for f in a.forwards if len(f.activities))
    assert isinstance(fwd.activities, ActivityRows)
    acts = list(fwd.activities)
    gpu = fwd.gpu
    assert [gpu.names[c] for c in gpu.name.tolist()] == [x.event.name for x in acts]
    assert [KINDS[k] for k in gpu.kind.tolist()] == [x.kind for x in acts]
    assert gpu.dur.tolist() == [x.event.dur for x in acts] and gpu.ts.tolist() == [x.event.ts for x in acts]
    assert [gpu.names[c] for c in gpu.launch_name.tolist()] == [x.launch.name for x in acts]
    assert gpu.launch_driver.tolist() == [x.launch.cat == "cuda_driver" for x in acts]
    assert fwd.gpu_time_us == sum(x.event.dur for x in acts)
    made = Forward(fwd.region, acts, list(fwd.cpu_ops))  # as lint cuts a forward: from events
    assert made.gpu_time_us == fwd.gpu_time_us
    assert [made.count(k) for k in KINDS] == [sum(x.kind == k for x in acts) for k in KINDS]
    mine = columns_of_events(acts)
    assert [mine.names[c] for c in mine.launch_name.tolist()] == [x.launch.name for x in acts]
    assert mine.launch_driver.tolist() == gpu.launch_driver.tolist()


def test_an_activity_is_one_object_and_shares_its_launch():
    a = analyze_trace(load(GPU_TRACES[0]))
    fwd = next(f for f in a.forwards if len(f.activities))
    first = fwd.activities[0]
    assert fwd.activities[0] is first and list(fwd.activities)[0] is first
    by_row = {}
    for act, row in zip(fwd.activities, fwd.launch_rows.tolist(), strict=True):
        assert by_row.setdefault(row, act.launch) is act.launch  # one launch object per launch row


def test_first_seen_groups_keep_order():
    groups = first_seen_groups(np.array([5, 2, 5, 9, 2, 5]))
    assert [g.tolist() for g in groups] == [[0, 2, 5], [1, 4], [3]]
    assert first_seen_groups(np.zeros(0, np.int64)) == []
