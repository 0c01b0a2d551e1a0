"""The array forms of the analysis's queries, each checked against the Python walk or list it replaced, on
random inputs: columns.Hits (under_spans' answers), chain_bounds, columns.nesting_order, OpTree.outermost."""

import numpy as np

from attnprof.analysis.attention_calls import chain_bounds
from attnprof.analysis.columns import Hits


def _hits(lists: list[list[int]]) -> Hits:
    sizes = [len(x) for x in lists]
    return Hits(np.array([w for x in lists for w in x], np.int64), np.concatenate(([0], np.cumsum(sizes))))


def test_hits_answer_as_the_lists_they_replace():
    rng = np.random.default_rng(7)
    for _ in range(50):
        lists = [sorted(rng.choice(30, rng.integers(0, 5), replace=False).tolist()) for _ in range(rng.integers(1, 12))]
        hits = _hits(lists)
        assert [hits[i] for i in range(len(hits))] == lists
        assert hits.every() == sorted({w for x in lists for w in x})
        flags = rng.random(30) < 0.3
        assert hits.any_of(flags).tolist() == [any(flags[w] for w in x) for x in lists]
        lo = rng.integers(0, len(lists), 6)
        hi = lo + rng.integers(0, 3, 6).clip(max=len(lists) - lo)
        keep = rng.random(30) < 0.7
        merged = hits.merged(lo, hi, keep)
        assert [merged[k] for k in range(len(merged))] == [
            sorted({w for i in range(a, b) for w in lists[i] if keep[w]}) for a, b in zip(lo, hi, strict=True)]


def _chain_bounds_by_names(names: list[str], reach: int) -> list[tuple[int, int]]:
    """The walk over every name that chain_bounds replaced."""
    out, last_end = [], -1
    for i, name in enumerate(names):
        if name != "s" or i <= last_end:
            continue
        before = next((j for j in range(i - 1, max(i - reach - 2, last_end), -1) if names[j] == "m"), None)
        after = next((j for j in range(i + 1, min(i + reach + 2, len(names))) if names[j] == "m"), None)
        if before is not None and after is not None:
            out.append((before, after))
            last_end = after
    return out


def test_chain_bounds_visits_only_the_softmaxes_and_finds_what_the_walk_did():
    rng = np.random.default_rng(3)
    for _ in range(300):
        names = rng.choice(["s", "m", "x"], rng.integers(0, 40), p=[0.2, 0.3, 0.5]).tolist()
        marks = np.array([n == "s" for n in names], np.bool_), np.array([n == "m" for n in names], np.bool_)
        assert chain_bounds(*marks, 2) == _chain_bounds_by_names(names, 2)


def test_nesting_order_is_the_lexsort_it_replaces():
    from attnprof.analysis.columns import Spans, nesting_order
    rng = np.random.default_rng(11)
    for _ in range(200):
        n = int(rng.integers(0, 30))
        ts = np.sort(rng.integers(0, 8, n).astype(np.float64)) if rng.random() < 0.8 else rng.integers(0, 8, n) * 1.0
        dur = rng.integers(0, 4, n).astype(np.float64)
        spans = Spans(ts, dur, ts + dur, np.zeros(n, np.int64), {})
        assert nesting_order(spans).tolist() == np.lexsort((-dur, ts)).tolist()


def test_outermost_stops_where_a_walk_down_from_the_roots_stops():
    from attnprof.analysis.columns import Spans
    from attnprof.analysis.nesting import OpTree
    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        ts = np.sort(rng.integers(0, 50, n)).astype(np.float64)
        dur = rng.integers(0, 30, n).astype(np.float64)  # random spans: nested, disjoint and overlapping
        thread = rng.integers(0, 2, n)
        tree = OpTree([None] * n, Spans(ts, dur, ts + dur, thread, {(0, 0): 0, (0, 1): 1}))
        stop = rng.random(n) < 0.4
        walked, todo = [], list(reversed(tree.root_positions))
        while todo:
            i = todo.pop()
            if stop[i]:
                walked.append(i)
            else:
                todo.extend(reversed(tree.kid_positions(i)))
        found, root = tree.outermost(stop)
        assert found.tolist() == sorted(walked)
        assert len(root) == len(found)
        for i, r in zip(found.tolist(), root.tolist(), strict=True):
            up = i
            while tree.parent_positions([up])[0] >= 0:
                up = tree.parent_positions([up])[0]
            assert tree.root_positions[r] == up


def test_gpu_names_by_the_prefilter_are_those_tested_one_by_one():
    from attnprof.analysis import queries as q
    from attnprof.analysis.attribution import analyze_trace
    from attnprof.gpu import kernel_names as kn
    from attnprof.trace.reader import load
    from support import h200_trace

    found = set()
    for variant in ("naive", "sdpa-flash", "sdpa-math", "flex"):
        a, every = analyze_trace(load(h200_trace(variant))), analyze_trace(load(h200_trace(variant)))
        for test, could in ((kn.is_gemm, kn.GEMM), (kn.is_attention, kn.ATTENTION)):
            named = {n: p.tolist() for n, p in q.kernels_named(a, test, could).items()}
            assert named == {n: p.tolist() for n, p in q.kernels_by_name(every).items() if test(n)}
            passing = q.gpu_named(a, q.all_gpu(a), test, could)
            assert passing.tolist() == q.gpu_named(every, q.all_gpu(every), test).tolist()
            found |= {could} if named else set()
    assert found == {kn.GEMM, kn.ATTENTION}
