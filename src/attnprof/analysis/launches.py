"""Launches between host ops and GPU work: the host ops enclosing a launch (`launch_chain`), the GPU work
launched inside host ops (`under_spans`, `kernels_under`), built once per forward (or analysis) and cached on
the Analysis (queries.per); on a whole-model trace a forward has thousands of ops and launches, so the builds
are array operations over the forward's launches by thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import numpy as np

from attnprof.analysis.activities import ActivityRows, take_activities
from attnprof.analysis.attribution import Activity, Analysis, Forward
from attnprof.analysis.columns import Hits, Spans, ranges, spans_at, spans_of
from attnprof.analysis.nesting import EPS
from attnprof.analysis.queries import op_columns, op_tree, per, threads
from attnprof.analysis.rows import take
from attnprof.trace.reader import Event


def launch_chain(a: Analysis, act: Activity, fwd: Forward | None = None) -> list[Event]:
    """The host ops that enclose the launch of a GPU activity (of `fwd`, when given), outermost first;
    cached per analysis: every rule asks for the same chains."""
    if act.launch is None:
        return []
    return per(a, "chain", act.launch, lambda launch: _chain(a, fwd, launch))


def _chain(a: Analysis, fwd: Forward | None, launch: Event) -> list[Event]:
    laid, ops = _chain_source(a, fwd)
    return laid.enclosing(launch, ops)


def _chain_source(a: Analysis, fwd: Forward | None) -> tuple:
    """(the nesting, its ops) that chains are read from: the forward's own op tree where the index vouches
    that no op outside the forward encloses its events and the tree has no partial overlaps; else the index."""
    if fwd is not None and a.index.seals(fwd):
        tree = op_tree(a, fwd)
        if tree.clean:
            return tree.laid, tree.ops
    return a.index.laid, a.index.ops


def launch_chains(a: Analysis, fwd: Forward, acts: list[Activity]) -> list[list[Event]]:
    """`launch_chain` of each of `acts`: those not cached found all at once, their ops made together."""
    laid, ops = _chain_source(a, fwd)
    store = a.caches.setdefault("chain", {})
    todo = list({id(x.launch): x.launch for x in acts
                 if x.launch is not None and store.get(id(x.launch), (None,))[0] is not x.launch}.values())
    held = laid.holding_each(todo) if todo else []
    made = dict(zip(wanted := sorted({i for at in held for i in at}), take(ops, wanted), strict=True))
    for launch, at in zip(todo, held, strict=True):  # as launch_chain caches them
        store[id(launch)] = (launch, [made[i] for i in at if made[i] is not launch])
    return [launch_chain(a, act, fwd) for act in acts]


def launch_chain_positions(a: Analysis, fwd: Forward, at: list[int]) -> tuple[Sequence[Event], list[list[int]]]:
    """The host ops that chains are read from (`_chain_source`), and per activity at `at` of `fwd` where the
    ops enclosing its launch are among them, outermost first (empty: no launch). No event is made where the
    forward says where its launches are; else from `launch_chains`' events."""
    if fwd.launch_rows is None:  # a forward made from events: each chain its own ops
        chains = launch_chains(a, fwd, take_activities(fwd.activities, at))
        ends = list(accumulate(map(len, chains)))
        return [op for chain in chains for op in chain], [list(range(e - len(c), e)) for e, c in
                                                          zip(ends, chains, strict=True)]
    laid, ops = _chain_source(a, fwd)
    launch = np.asarray(fwd.launch_rows)[np.asarray(at, np.intp)]
    has = np.flatnonzero(launch >= 0)
    out: list[list[int]] = [[] for _ in at]
    for k, held in zip(has.tolist(), laid.holding_rows(a.trace.columns, launch[has]), strict=True):
        out[k] = held
    return ops, out


def ops_named(a: Analysis, fwd: Forward, name: str) -> list[Event]:
    """The host ops with this name that may enclose a launch of `fwd`: its own when the index vouches
    that nothing outside it encloses its events, else any of the analysis's whose span meets that of
    the forward's launches (a cheap cut before `kernels_under`'s lookups)."""
    if a.index.seals(fwd):
        return fwd.ops_named(name)
    spans = per(a, "launches", fwd, lambda f: _launch_index(a, f)).values()
    if not spans:
        return []
    first_end, last_start = min(float(s[1].min()) for s in spans), max(float(s[0][-1]) for s in spans)
    ops = per(a, "named", name, lambda n: [op for op in a.index.ops if op.name == n])
    return [op for op in ops if op.ts <= last_start and op.ts + op.dur + EPS >= first_end]


def under_named(a: Analysis, fwd: Forward, name: str) -> list[int]:
    """Where the activities launched inside the host ops called `name` (`ops_named`) are in
    `fwd.activities`: from the forward's columns at those ops' positions when it is sealed (no event
    made), else from the ops themselves."""
    if a.index.seals(fwd):
        return under_spans(a, fwd, op_columns(a, fwd, fwd.positions_named(name))).every()
    return under(a, fwd, ops_named(a, fwd, name))


def kernels_under(a: Analysis, fwd: Forward, ops: list[Event]) -> list[Activity]:
    """GPU activities of `fwd` whose launch lies inside one of `ops` (by identity, not name): on the op's
    thread, starting at or after it and ending by its end (EPS), as `launch_chain` nests them."""
    return take_activities(fwd.activities, under(a, fwd, ops))


def under(a: Analysis, fwd: Forward, ops: list[Event]) -> list[int]:
    """Where `kernels_under`'s activities are in `fwd.activities`, in order."""
    return under_spans(a, fwd, spans_of(ops)).every()


def under_spans(a: Analysis, fwd: Forward, spans: Spans) -> Hits:
    """Per host span (given as columns): where the activities whose launch lies inside it are in
    `fwd.activities`, in launch order, as two arrays (`Hits`), from array operations over the forward's
    launches of each thread."""
    launches = per(a, "launches", fwd, lambda f: _launch_index(a, f))
    owners, found = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for key, code in spans.threads.items():
        mine = np.flatnonzero(spans.thread == code) if key in launches else ()
        if not len(mine):
            continue
        starts, ends, where = launches[key]
        ts, limit = spans.ts[mine], spans.end[mine] + EPS
        lo, hi = np.searchsorted(starts, ts, side="left"), np.searchsorted(starts, limit, side="right")
        owner, at = ranges(lo, hi)  # each op once per launch starting in it
        inside = ends[at] <= limit[owner]
        owners.append(mine[owner[inside]])
        found.append(where[at[inside]])
    owner = np.concatenate(owners)
    order = np.argsort(owner, kind="stable")  # per span, its launches in start order
    return Hits(np.concatenate(found)[order], np.searchsorted(owner[order], np.arange(len(spans) + 1)))


def launch_spans(a: Analysis, fwd: Forward) -> tuple[list[int], Spans]:
    """The places of the forward's activities that have a launch, and their launches as spans: cut from
    the trace's columns at each call where the forward says where its launches are (not kept), else made
    from the launches once per forward."""
    if fwd.launch_rows is not None:
        return list(range(len(fwd.activities))), spans_at(a.trace.columns, fwd.launch_rows, threads(a))

    def build(f: Forward) -> tuple[list[int], Spans]:
        found = [i for i, act in enumerate(f.activities) if act.launch is not None]
        return found, spans_of([f.activities[i].launch for i in found])
    return per(a, "launch spans", fwd, build)


def _launch_index(a: Analysis, fwd: Forward) -> dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per launching thread: the launches of a forward's activities by start, ties in activity order
    (start, end, position of the activity in `fwd.activities`; an activity listed twice counts at its
    last place)."""
    acts = fwd.activities
    found, spans = launch_spans(a, fwd)
    # activities made from rows are distinct rows; a list made from events may list one twice
    if not isinstance(acts, ActivityRows) and len({id(act) for act in acts}) != len(acts):
        last = {id(act): i for i, act in enumerate(acts)}
        kept = [k for k, i in enumerate(found) if last[id(acts[i])] == i]
        found, spans = [found[k] for k in kept], spans.take(kept)
    order = np.lexsort((spans.ts, spans.thread))  # by thread, then start; stable
    where = np.asarray(found, np.int64)[order]
    ts, end, thread = spans.ts[order], spans.end[order], spans.thread[order]
    bounds = {key: np.searchsorted(thread, [code, code + 1]).tolist() for key, code in spans.threads.items()}
    return {key: (ts[lo:hi], end[lo:hi], where[lo:hi]) for key, (lo, hi) in bounds.items() if lo < hi}
