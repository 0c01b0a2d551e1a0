"""Host-op nesting per thread, the one engine every stage uses: which cpu_ops enclose an event
(OpIndex, over a whole trace) and the op tree of a forward (OpTree). Imports no torch.

It rests on the nesting order (by start; at equal starts the longer op first, so that an
enclosing op comes before what it encloses) and on one walk per thread with a stack of the
spans that may still hold the next one (`links`). The index lays every thread's ops out in
one list, thread after thread, and keeps per position: the start, the end plus EPS ("held")
and the latest earlier op still open at the start ("up").
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from functools import cached_property
from itertools import compress, islice
from operator import attrgetter, eq, lt
from typing import Any

from attnprof.trace.reader import Event

EPS = 1e-3  # µs: torch rounds ends to the nanosecond, so a child may end a hair past its parent
_TS, _DUR = attrgetter("ts"), attrgetter("dur")
_INF = float("inf")
_NEGATIVE = (0.0).__gt__


def nesting_order(ops: list[Event]) -> list[Event]:
    """`ops` as `sorted(ops, key=lambda e: (e.ts, -e.dur))` orders them, without a Python call per op."""
    out = ordered(ops)[0]
    return list(out) if out is ops else out


def ordered(ops: list[Event]) -> tuple[list[Event], list[float], bool]:
    """(nesting order, starts, whether two ops tie on both start and duration). The order is `ops`
    itself, not a copy, when they are in it already: do not change the list."""
    starts = [e.ts for e in ops]
    if all(map(lt, starts, islice(starts, 1, None))):  # already by start, none equal: the usual case
        return ops, starts, False
    out = sorted(ops, key=_TS)
    starts = [e.ts for e in out]
    if not any(map(eq, starts, islice(starts, 1, None))):
        return out, starts, False
    tied, i, n = False, 0, len(out)
    while i < n:  # each run of equal starts, the longer first (a stable sort keeps the order of equals)
        j = i + 1
        while j < n and starts[j] == starts[i]:
            j += 1
        if j - i > 1:
            run = out[i:j] = sorted(out[i:j], key=_DUR, reverse=True)
            tied = tied or any(map(eq, map(_DUR, run), map(_DUR, islice(run, 1, None))))
        i = j
    return out, starts, tied


def by_thread(ops: list[Event]) -> dict[tuple, list[Event]]:
    """`ops` grouped by (pid, tid), each group in the given order."""
    grouped: dict[tuple, list[Event]] = {}
    pid = tid = group = None
    for op in ops:  # ops come in runs of one thread: look the group up once per run
        if op.tid != tid or op.pid != pid or group is None:
            pid, tid = op.pid, op.tid
            group = grouped.setdefault((pid, tid), [])
        group.append(op)
    return grouped


def links(held: list[float], at: list[float], first: int = 0) -> list[int]:
    """For the items first, first + 1, ... (one per value of `at`): the top of a stack of earlier items
    (-1: none) once the tops whose `held` is below the item's `at` are popped; then the item goes on.
    `held` is indexed by item and ends with a sentinel, +inf.

    With held = end + EPS and at = start, that is the latest earlier span still open at each start:
    following these links from the last span to start at or before t visits every span that holds
    t (plus a few that do not), latest start first, whatever the nesting, since a span is only
    dropped once it has ended, and then it cannot hold a later t."""
    out: list[int] = []
    stack = [-1]
    add, push, pop = out.append, stack.append, stack.pop
    for i, x in enumerate(at, first):
        while held[stack[-1]] < x:
            pop()
        add(stack[-1])
        push(i)
    return out


def open_parents(spans: list[Event]) -> list[int]:
    """For spans sorted by start: the index of the latest earlier span still open at each start."""
    held = [s.ts + s.dur + EPS for s in spans]
    held.append(_INF)
    return links(held, [s.ts for s in spans])


class OpIndex:
    """Host-op nesting per thread: which cpu_ops enclose a given host event.

    Built on first use, so an analysis that never asks pays nothing. A lookup follows the links of
    `links`: it costs the nesting depth, not the number of ops.
    """

    def __init__(self, ops: list[Event], sealed: Iterable[Any] = ()):
        self._ops = ops
        self._laid: tuple | None = None
        self._sealed = {id(f): f for f in sealed}

    def seals(self, forward: Any) -> bool:
        """Whether no op here outside `forward`'s cpu_ops overlaps its region on its process, so that
        the ops enclosing an event of the region are all the forward's own (`analyze_trace` says so
        for the forwards it makes, when true)."""
        return self._sealed.get(id(forward)) is forward

    @property
    def ops(self) -> list[Event]:
        return self._ops

    def _layout(self) -> tuple:
        """(ops per thread in nesting order, one thread after another; starts; held, with a +inf
        sentinel at the end; up; {thread: (first, end)})."""
        if self._laid is None:
            ops: list[Event] = []
            starts: list[float] = []
            blocks = {}
            for key, group in by_thread(self._ops).items():
                laid, group_starts, _ = ordered(group)
                blocks[key] = (len(ops), len(ops) + len(laid))
                ops += laid
                starts += group_starts
            held = [op.ts + op.dur + EPS for op in ops]
            held.append(_INF)
            up: list[int] = []
            for first, end in blocks.values():
                up += links(held, starts[first:end], first)
            self._laid = (ops, starts, held, up, blocks)
        return self._laid

    def chain(self, event: Event) -> list[Event]:
        """The cpu_ops that enclose `event` on its thread, outermost first."""
        ops, starts, held, up, blocks = self._layout()
        first, end = blocks.get((event.pid, event.tid), (0, 0))
        j = bisect_right(starts, event.ts, first, end) - 1
        stop = event.ts + event.dur
        enclosing = []
        while j >= first:
            op = ops[j]
            if stop <= held[j] and op is not event:
                enclosing.append(op)
            j = up[j]
        enclosing.reverse()  # the links run innermost (latest start) first
        return enclosing


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
