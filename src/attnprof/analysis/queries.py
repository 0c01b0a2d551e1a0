"""Queries the rules share over an Analysis: a forward's ops as columns, its op tree, the ops enclosing a
launch, which GPU work a host op launched. Each answer is built once per forward (or analysis) and cached on
the Analysis; on a whole-model trace a forward has thousands of ops, so the builds are array operations.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable

import numpy as np

from attnprof.analysis.attribution import Activity, Analysis, Forward
from attnprof.analysis.columns import Spans, spans_at, spans_of, thread_codes
from attnprof.analysis.nesting import EPS, OpTree
from attnprof.trace.reader import Event


def per(a: Analysis, kind: str, owner: object, build: Callable):
    """`build(owner)`, made once per analysis and `owner` (a forward, a launch, a name, the analysis),
    kept in the analysis's own cache so that it dies with it. Keyed by identity; an entry counts only
    while it holds that very owner, since ids get reused."""
    store = a.caches.setdefault(kind, {})
    if owner is a:  # one value per kind (holding `a` itself here would make a cycle)
        if None not in store:
            store[None] = build(a)
        return store[None]
    found = store.get(id(owner))
    if found is None or found[0] is not owner:
        found = store[id(owner)] = (owner, build(owner))
    return found[1]


def n_forwards(a: Analysis) -> int:
    return max(len(a.forwards), 1)


def per_fwd(total: float, a: Analysis) -> float:
    """A total over all forwards, as an average per forward."""
    x = round(total / n_forwards(a), 3)
    return int(x) if x.is_integer() and abs(x) >= 1024 else x  # byte counts read better as integers


def kernels_by_name(a: Analysis) -> dict[str, list[Activity]]:
    """Every forward's kernels grouped by name, first seen first; built once per analysis."""
    return per(a, "kernels by name", a, _kernels_by_name)


def _kernels_by_name(a: Analysis) -> dict[str, list[Activity]]:
    grouped: dict[str, list[Activity]] = {}
    for fwd in a.forwards:
        for act in fwd.activities:
            if act.kind == "kernel":
                grouped.setdefault(act.event.name, []).append(act)
    return grouped


def op_columns(a: Analysis, fwd: Forward) -> Spans:
    """The forward's cpu_ops as columns, cut from the trace's (built once per forward)."""
    def build(f: Forward) -> Spans:
        if f.rows is None:
            return spans_of(f.cpu_ops)
        return spans_at(a.trace.columns, f.rows, per(a, "thread codes", a, lambda x: thread_codes(x.trace.columns)))
    return per(a, "op columns", fwd, build)


def names_starting(a: Analysis, fwd: Forward, prefix: str) -> np.ndarray:
    """Per cpu_op of the forward: whether its name starts with `prefix` (each distinct name tested once)."""
    def build(f: Forward) -> np.ndarray:
        if f.rows is None:
            return np.fromiter([op.name.startswith(prefix) for op in f.cpu_ops], np.bool_, len(f.cpu_ops))
        return _name_table(a, prefix)[a.trace.columns.name[f.rows]]
    return per(a, ("names starting", prefix), fwd, build)


def _name_table(a: Analysis, prefix: str) -> np.ndarray:
    names = a.trace.columns.names
    return per(a, ("name table", prefix), a,
               lambda x: np.fromiter([n.startswith(prefix) for n in names], np.bool_, len(names)))


def op_tree(a: Analysis, fwd: Forward) -> OpTree:
    """The nesting of a forward's host ops, built once per forward: five rules walk it."""
    return per(a, "tree", fwd, lambda f: OpTree(f.cpu_ops, op_columns(a, f)))


def launch_chain(a: Analysis, act: Activity, fwd: Forward | None = None) -> list[Event]:
    """The host ops that enclose the launch of a GPU activity (of `fwd`, when given), outermost first;
    cached per analysis: every rule asks for the same chains."""
    if act.launch is None:
        return []
    return per(a, "chain", act.launch, lambda launch: _chain(a, fwd, launch))


def _chain(a: Analysis, fwd: Forward | None, launch: Event) -> list[Event]:
    """From the forward's own op tree where the index vouches that no op outside the forward encloses
    its events and the tree has no partial overlaps; else from the index (built for that)."""
    if fwd is not None and a.index.seals(fwd):
        tree = op_tree(a, fwd)
        if tree.clean:
            return tree.enclosing(launch)
    return a.index.chain(launch)


def ops_named(a: Analysis, fwd: Forward, name: str) -> list[Event]:
    """The host ops with this name that may enclose a launch of `fwd`: its own when the index vouches
    that nothing outside it encloses its events, else any of the analysis's whose span meets that of
    the forward's launches (a cheap cut before `kernels_under`'s lookups)."""
    if a.index.seals(fwd):
        return fwd.ops_named(name)
    spans = per(a, "launches", fwd, _launch_index).values()
    if not spans:
        return []
    first_end, last_start = min(min(s[1]) for s in spans), max(s[0][-1] for s in spans)
    ops = per(a, "named", name, lambda n: [op for op in a.index.ops if op.name == n])
    return [op for op in ops if op.ts <= last_start and op.ts + op.dur + EPS >= first_end]


def kernels_under(a: Analysis, fwd: Forward, ops: list[Event]) -> list[Activity]:
    """GPU activities of `fwd` whose launch lies inside one of `ops` (by identity, not name): on the op's
    thread, starting at or after it and ending by its end (EPS), as `launch_chain` nests them."""
    launches = per(a, "launches", fwd, _launch_index)
    hits: set[int] = set()
    for op in ops:
        held = launches.get((op.pid, op.tid))
        if held is None:
            continue
        starts, ends, where = held
        limit = op.ts + op.dur + EPS
        for k in range(bisect_left(starts, op.ts), bisect_right(starts, limit)):
            if ends[k] <= limit:
                hits.add(where[k])
    return [fwd.activities[i] for i in sorted(hits)]


def _launch_index(fwd: Forward) -> dict[tuple, tuple[list[float], list[float], list[int]]]:
    """Per launching thread: the launches of a forward's activities by start (start, end, position of
    the activity in `fwd.activities`; an activity listed twice counts at its last place)."""
    acts = fwd.activities
    found = [(act.launch, i) for i, act in enumerate(acts) if act.launch is not None]
    if len({id(act) for act in acts}) != len(acts):
        last = {id(act): i for i, act in enumerate(acts)}
        found = [(launch, i) for launch, i in found if last[id(acts[i])] == i]
    found.sort(key=lambda row: row[0].ts)
    grouped: dict[tuple, list[tuple[Event, int]]] = {}
    pid = tid = rows = None
    for row in found:  # launches come in runs of one thread
        launch = row[0]
        if launch.tid != tid or launch.pid != pid or rows is None:
            pid, tid = launch.pid, launch.tid
            rows = grouped.setdefault((pid, tid), [])
        rows.append(row)
    return {key: ([e.ts for e, _ in rows], [e.ts + e.dur for e, _ in rows], [i for _, i in rows])
            for key, rows in grouped.items()}
