"""Host-op nesting per thread: which cpu_ops enclose an event. Imports no torch.

It rests on the nesting order (by start; at equal starts the longer op first, so that an
enclosing op comes before what it encloses) and on one walk per thread with a stack of the
spans that may still hold the next one (`links`). The index lays every thread's ops out in
one list, thread after thread, and keeps per position: the start, the end plus EPS ("held")
and the latest earlier op still open at the start ("up").
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from itertools import islice
from operator import attrgetter, eq, lt
from typing import Any

from attnprof.trace.reader import Event

EPS = 1e-3  # µs: torch rounds ends to the nanosecond, so a child may end a hair past its parent
_TS, _DUR = attrgetter("ts"), attrgetter("dur")
_INF = float("inf")


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
