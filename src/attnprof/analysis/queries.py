"""Host-op nesting inside a forward, for the rules: the op tree, and which GPU work a host op launched.

Each is built once per forward (or analysis) and shared by the rules; on a whole-model trace a
forward has thousands of ops, so the builds are kept to a few passes over them.
"""

from __future__ import annotations

import weakref
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from functools import cached_property
from itertools import compress
from operator import attrgetter

from attnprof.analysis.attribution import Activity, Analysis, Forward
from attnprof.trace.nesting import EPS, ordered
from attnprof.trace.reader import Event

_DUR = attrgetter("dur")
_NEGATIVE = (0.0).__gt__
_INF = float("inf")


_ANALYSES: dict[int, dict[str, dict]] = {}  # what the rules share, per live analysis


def per(a: Analysis, kind: str, owner: object, build: Callable):
    """`build(owner)`, made once per analysis and `owner` (a forward, a launch, a name, the analysis).
    Dropped with the analysis, so that nothing here keeps one alive; keyed by identity, and an entry
    counts only while it holds that very owner, since ids get reused."""
    caches = _ANALYSES.get(id(a))
    if caches is None:
        caches = _ANALYSES[id(a)] = {}
        weakref.finalize(a, _ANALYSES.pop, id(a), None)
    store = caches.setdefault(kind, {})
    if owner is a:  # one value per kind (holding `a` itself here would keep it alive)
        if None not in store:
            store[None] = build(a)
        return store[None]
    found = store.get(id(owner))
    if found is None or found[0] is not owner:
        found = store[id(owner)] = (owner, build(owner))
    return found[1]


class OpTree:
    """Host-op nesting inside one forward: per thread, in nesting order, an op's parent is the latest
    earlier op of the thread that it ends within (EPS). Ops outside the forward are not in it."""

    def __init__(self, ops: list[Event]):
        self.ops = ops  # the forward's cpu_ops
        self._order, self._starts, _ = ordered(ops)
        self._ups, self._children, self._threads, self.clean = _nest(self._order)
        self._thread_starts: dict[tuple, list[float]] = {}

    def _find(self, op: Event) -> int | None:
        """Where `op` is in the nesting order (found by its start, not by a table of every op)."""
        starts, order = self._starts, self._order
        i = bisect_left(starts, op.ts)
        while i < len(order) and starts[i] == op.ts:
            if order[i] is op:
                return i
            i += 1
        return None

    def parent(self, op: Event) -> Event | None:
        i = self._find(op)
        j = -1 if i is None else self._ups[i]
        return self._order[j] if j >= 0 else None

    def children(self, op: Event) -> list[Event]:
        i = self._find(op)
        return (None if i is None else self._children[i]) or []

    @cached_property
    def roots(self) -> list[Event]:
        """The ops with no parent, in nesting order."""
        return [op for op, up in zip(self._order, self._ups, strict=True) if up < 0]

    def chain(self, op: Event) -> list[Event]:
        """Enclosing ops of `op`, outermost first (op itself excluded)."""
        out, p = [], self.parent(op)
        while p is not None:
            out.append(p)
            p = self.parent(p)
        return out[::-1]

    def enclosing(self, event: Event) -> list[Event]:
        """The ops that enclose `event` on its thread, outermost first, as `OpIndex.chain` finds them
        among these ops. Only when `clean`: then the parent links are also the links to the latest
        earlier op still open at each start, which reach every op that holds a time (see `links`)."""
        order, ups = self._order, self._ups
        j = self._last_started(event)
        stop = event.ts + event.dur
        out = []
        while j >= 0:
            op = order[j]
            if stop <= op.ts + op.dur + EPS and op is not event:
                out.append(op)
            j = ups[j]
        out.reverse()
        return out

    def _last_started(self, event: Event) -> int:
        """The position of the last op of the event's thread to start at or before it (-1: none)."""
        key = (event.pid, event.tid)
        where = self._threads.get(key, ())
        starts = self._thread_starts.get(key)
        if starts is None:
            starts = self._thread_starts[key] = list(map(self._starts.__getitem__, where))
        k = bisect_right(starts, event.ts) - 1
        return where[k] if k >= 0 else -1

    def self_us(self, op: Event) -> float:
        return max(op.dur - sum(map(_DUR, self.children(op))), 0.0)

    def self_times(self) -> list[float]:
        """`self_us` of every op, aligned with `ops`. Written for speed, `max(x, 0.0)` included: this is
        the hot part of a whole-model trace (thousands of ops with children per forward)."""
        order, children = self._order, self._children
        out = [op.dur for op in order]  # no children: self time = duration
        if any(map(_NEGATIVE, out)):
            out = [0.0 if d < 0.0 else d for d in out]
        for i in compress(range(len(order)), children):  # the ops with children, most with one
            k = children[i]
            v = order[i].dur - (0 + k[0].dur if len(k) == 1 else sum(map(_DUR, k)))  # 0 + x: sum([x])
            out[i] = 0.0 if v < 0.0 else v
        if order is self.ops:
            return out
        at = {id(op): v for op, v in zip(order, out, strict=True)}
        return [at[id(op)] for op in self.ops]

    def descendants(self, op: Event) -> list[Event]:
        out, todo = [], list(self.children(op))
        while todo:
            e = todo.pop()
            out.append(e)
            todo.extend(self.children(e))
        return out


def _nest(order: list[Event]) -> tuple[list[int], list[list[Event] | None], dict[tuple, list[int]], bool]:
    """(parent position, children, positions per thread, clean) of the ops of `order` (in nesting order
    per thread): one stack per thread of the ops that may still hold the next (end + EPS and position:
    two lists, no tuple made per op), from which the ops that end before the next one are popped.
    Clean: none of them was still open at the next one's start (no partial overlap)."""
    ups = [-1] * len(order)
    children: list[list[Event] | None] = [None] * len(order)
    threads: dict[tuple, tuple[list[float], list[int], list[int]]] = {}
    clean, pid, tid = True, None, None
    held: list[float] = []
    at: list[int] = []
    mine: list[int] = []
    for i, op in enumerate(order):  # hot on whole-model traces: kept lean
        if op.tid != tid or op.pid != pid:  # ops come in runs of one thread
            pid, tid = op.pid, op.tid
            held, at, mine = threads.setdefault((pid, tid), ([_INF], [-1], []))
        start = op.ts
        end = start + op.dur
        while held[-1] < end:
            if held.pop() >= start:
                clean = False
            at.pop()
        up = ups[i] = at[-1]
        if up >= 0:
            kids = children[up]
            if kids is None:
                children[up] = [op]
            else:
                kids.append(op)
        held.append(end + EPS)
        at.append(i)
        mine.append(i)
    return ups, children, {key: state[2] for key, state in threads.items()}, clean


def op_tree(a: Analysis, fwd: Forward) -> OpTree:
    """The nesting of a forward's host ops, built once per forward: five rules walk it."""
    return per(a, "tree", fwd, lambda f: OpTree(f.cpu_ops))


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
