"""Host-op nesting, as the rules use it, against plain reference versions of what it computes: the op
tree (the per-thread stack it has always been), the ops that enclose a launch (every op of the thread
that holds it), and the GPU work under an op. The fast paths may only ever give the same answers."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnprof.analysis import launches, nesting, queries
from attnprof.analysis.attribution import analyze_trace
from attnprof.gpu import kernel_info
from attnprof.trace.reader import Args, Event, Trace, load
from support import FIXTURES

EXAMPLES = int(os.environ.get("ATTNPROF_FUZZ_EXAMPLES", "100"))

REAL = sorted(p for p in FIXTURES.glob("*/*.json.gz") if p.parent.name != "bad")
EPS = 1e-3


def reference_tree(ops: list[Event]) -> tuple[dict, dict, list]:
    """The op tree as it was first written: sorted by (start, -duration), one stack per thread."""
    parent: dict[int, Event | None] = {}
    children: dict[int, list[Event]] = {}
    roots, stacks = [], {}
    for op in sorted(ops, key=lambda e: (e.ts, -e.dur)):
        stack = stacks.setdefault((op.pid, op.tid), [])
        end = op.ts + op.dur
        while stack and stack[-1][1] + EPS < end:
            stack.pop()
        if stack:
            parent[id(op)] = stack[-1][0]
            children.setdefault(id(stack[-1][0]), []).append(op)
        else:
            parent[id(op)] = None
            roots.append(op)
        stack.append((op, end))
    return parent, children, roots


def enclosing(ops: list[Event], event: Event) -> list[Event]:
    """What `OpIndex.chain` means: every op of the event's thread that holds it, outermost first."""
    inside = [op for op in ops if (op.pid, op.tid) == (event.pid, event.tid) and op is not event
              and op.ts <= event.ts and event.ts + event.dur <= op.ts + op.dur + EPS]
    return sorted(inside, key=lambda e: (e.ts, -e.dur))


def same(xs, ys) -> bool:
    return len(xs) == len(ys) and all(x is y for x, y in zip(xs, ys, strict=True))


spans = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 25), st.integers(1, 2)), max_size=30)


def ops_of(rows) -> list[Event]:
    return [Event(f"op{i}", "cpu_op", "X", float(ts), float(dur), 1, tid) for i, (ts, dur, tid) in enumerate(rows)]


@settings(max_examples=3 * EXAMPLES, deadline=None)
@given(spans, st.randoms())
def test_op_tree_equals_the_reference(rows, rnd):
    """Any spans (nested, overlapping, equal starts and durations, two threads), in any order."""
    ops = ops_of(rows)
    rnd.shuffle(ops)
    tree = nesting.OpTree(ops)
    parent, children, roots = reference_tree(ops)
    for op in ops:
        assert tree.parent(op) is parent[id(op)]
        assert same(tree.children(op), children.get(id(op), []))
    assert same(tree.roots, roots)


@settings(max_examples=3 * EXAMPLES, deadline=None)
@given(spans, spans)
def test_enclosing_ops_from_a_clean_tree_equal_their_definition(rows, probes):
    ops = ops_of(rows)
    tree = nesting.OpTree(ops)
    for ts, dur, tid in probes:
        probe = Event("launch", "cuda_runtime", "X", float(ts), dur / 4, 1, tid)
        if tree.clean:
            assert same(tree.enclosing(probe), enclosing(ops, probe))
    for op in ops:
        if tree.clean:
            assert same(tree.enclosing(op), enclosing(ops, op))


@settings(max_examples=3 * EXAMPLES, deadline=None)
@given(spans, spans)
def test_the_ops_holding_many_events_at_once_are_those_holding_each(rows, probes):
    ops = ops_of(rows)
    laid = nesting.OpTree(ops).laid
    events = [Event("launch", "cuda_runtime", "X", float(ts), dur / 4, 1, tid) for ts, dur, tid in probes] + ops
    assert laid.holding_each(events) == [laid.holding(e) for e in events]


def test_a_partial_overlap_makes_the_tree_unclean():
    assert nesting.OpTree(ops_of([(0, 10, 1), (2, 3, 1)])).clean
    assert not nesting.OpTree(ops_of([(0, 10, 1), (5, 10, 1)])).clean


@settings(max_examples=3 * EXAMPLES, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), max_size=40), st.integers(0, 40))
def test_the_reach_query_is_the_nearest_earlier_position_that_reaches(rows, cut):
    """The array query the trees rest on, against its definition (two blocks: positions before `cut`, the rest)."""
    held = np.array([h for h, _ in rows], np.float64)
    at = np.array([x for _, x in rows], np.float64)
    first = np.array([0 if i < cut else min(cut, len(rows)) for i in range(len(rows))], np.int64)
    want = [max((j for j in range(first[i], i) if held[j] >= at[i]), default=-1) for i in range(len(rows))]
    assert nesting.Reach(held).previous(at, first).tolist() == want



@pytest.mark.parametrize("gap", [1, 30, 31, 32, 33, 100])
def test_the_reach_query_finds_a_position_far_back(gap):
    """Past the first skip's blocks (2**(NEAR + 1) - 1 positions): the later, larger blocks find it."""
    held = np.array([9.0] + [1.0] * gap + [5.0], np.float64)
    at = np.full(len(held), 3.0)
    got = nesting.Reach(held).previous(at, np.zeros(len(held), np.int64)).tolist()
    assert got == [max((j for j in range(i) if held[j] >= 3.0), default=-1) for i in range(len(held))]

@st.composite
def traces(draw):
    """Regions with host ops in and around them (some straddling a region's start or end, on the
    region's process or another), launches inside them, and the GPU work they launched."""
    events = []
    ends = draw(st.lists(st.integers(20, 60), min_size=1, max_size=3))
    t = 0
    for length in ends:
        events.append(Event("fwd", "user_annotation", "X", float(t), float(length), 1, 1))
        t += length + draw(st.integers(0, 10))
    for ts, dur, tid, pid in draw(st.lists(st.tuples(st.integers(-5, t + 5), st.integers(0, 30),
                                                     st.integers(1, 2), st.sampled_from([1, 1, 2])), max_size=25)):
        events.append(Event(draw(st.sampled_from(["aten::copy_", "aten::mm", "x"])), "cpu_op", "X",
                            float(ts), float(dur), pid, tid))
    launches = draw(st.lists(st.tuples(st.integers(0, t), st.integers(1, 2)), max_size=12))
    for corr, (ts, tid) in enumerate(launches, 1):
        events.append(Event("cudaLaunchKernel", "cuda_runtime", "X", ts + 0.25, 0.5, 1, tid, Args(correlation=corr)))
        events.append(Event("k", "kernel", "X", float(t + corr), 1.0, 0, 7, Args(correlation=corr)))
    return Trace("t", events)


@settings(max_examples=3 * EXAMPLES, deadline=None)
@given(traces())
def test_launch_chains_and_kernels_under_equal_their_definitions(trace):
    a = analyze_trace(trace, "fwd")
    ops = [e for e in trace.events if e.cat == "cpu_op"]
    for fwd in a.forwards:
        for act in fwd.activities:
            assert same(launches.launch_chain(a, act, fwd), enclosing(ops, act.launch))
            if a.index.seals(fwd):  # nothing outside the forward holds its launches
                assert all(any(op is mine for mine in fwd.cpu_ops) for op in enclosing(ops, act.launch))
        chains = {id(act): enclosing(ops, act.launch) for act in fwd.activities}
        for name in ("aten::copy_", "aten::mm"):
            named = [op for op in ops if op.name == name]
            want = [act for act in fwd.activities if any(x is op for x in chains[id(act)] for op in named)]
            assert same(launches.kernels_under(a, fwd, named), want)
            assert same(launches.kernels_under(a, fwd, launches.ops_named(a, fwd, name)), want)


def test_a_region_with_an_op_across_its_edge_is_not_sealed():
    def analyzed(op_ts, op_dur):
        return analyze_trace(Trace("t", [Event("fwd", "user_annotation", "X", 10.0, 10.0, 1, 1),
                                         Event("x", "cpu_op", "X", op_ts, op_dur, 1, 1)]), "fwd")
    for ts, dur, sealed in [(12.0, 2.0, True), (5.0, 7.0, False), (15.0, 10.0, False), (0.0, 2.0, True)]:
        a = analyzed(ts, dur)
        assert a.index.seals(a.forwards[0]) is sealed, (ts, dur)


@pytest.mark.parametrize("path", REAL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_traces_take_the_fast_paths_and_agree(path):
    a = analyze_trace(load(path))
    for fwd in a.forwards:
        tree = queries.op_tree(a, fwd)
        assert a.index.seals(fwd) and tree.clean
        parent, children, _ = reference_tree(fwd.cpu_ops)
        assert all(tree.parent(op) is parent[id(op)] for op in fwd.cpu_ops)
        for act in fwd.activities[::5]:
            if act.launch is not None:
                assert same(tree.enclosing(act.launch), a.index.chain(act.launch))


def walk_params(s: str) -> str:
    """`_drop_params` as first written: a walk over every character."""
    depth = 0
    for i, ch in enumerate(s):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0 and i > 0:
            return s[:i]
    return s


@settings(max_examples=3 * EXAMPLES, deadline=None)
@given(st.text(alphabet="<>()a :", max_size=16))
def test_drop_params_equals_a_walk_over_every_character(name):
    assert kernel_info.drop_params(name) == walk_params(name)


@pytest.mark.parametrize("name", ["", "(", "a(", "(a)(b)", "f<(x)>(y)", "a>b(c)", "f<a<b>>(c)<d>(e)", "operator>>(x)"])
def test_drop_params_equals_the_walk_on_edge_cases_of_brackets(name):
    assert kernel_info.drop_params(name) == walk_params(name)


def test_drop_params_equals_the_walk_on_many_short_strings_of_brackets():
    rng = random.Random(0)
    strings = ["".join(rng.choice("<>()a") for _ in range(rng.randint(0, 10))) for _ in range(20000)]
    assert [kernel_info.drop_params(s) for s in strings] == [walk_params(s) for s in strings]


def test_drop_params_on_real_kernel_names():
    name = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<(anonymous)>>(int, F)"
    assert kernel_info.drop_params(name) == walk_params(name) == name[: name.index(">>(") + 2]
