"""Host-op nesting, the one engine every stage uses: the op tree of a forward (OpTree) and which cpu_ops
enclose an event anywhere in a trace (OpIndex). Imports no torch.

Both rest on one question, asked of every op at once with array operations (`Reach.previous`): per
thread, in nesting order (by start; at equal starts the longer first, so that an enclosing op comes before
what it encloses; full ties in the given order), the latest earlier op whose end + EPS reaches a time.
Asked at each op's end, it is the op's parent: what a per-thread stack walk (pop the ops that end before
this one ends) leaves on top, since the nearest such op is never popped first (whatever popped it would
reach further and be nearer). Asked at each op's start, it is the latest earlier op still open there
("opened"): following those links from the last op to start at or before t visits every op that holds t,
latest start first, whatever the nesting. The two agree for every op exactly when no op partially
overlaps another (`OpTree.clean`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from attnprof.analysis.columns import Spans, by_code, distinct, nesting_order, ranges, running_max, spans_of
from attnprof.analysis.rows import take
from attnprof.trace.columns import Columns
from attnprof.trace.reader import Event

NEAR = 4  # the largest block (2**NEAR) of the first skip: a parent is a few ops back (big5m: at most 10)
EPS = 1e-3  # µs: torch rounds ends to the nanosecond, so a child may end a hair past its parent


class Reach:
    """Running maxima of `held` over blocks of 2**k positions (levels[k][i]: the max of the 2**k ending at
    i, up to the largest block that fits, `top`), for all the questions `previous` asks about the same
    spans; a level is made when first searched (blocks beyond 2**NEAR seldom are: none on big5m)."""

    def __init__(self, held: np.ndarray):
        self.levels = [held]
        self.top = max(len(held).bit_length() - 1, 0)

    def _level(self, k: int) -> np.ndarray:
        while len(self.levels) <= k:
            prev, half = self.levels[-1], 1 << (len(self.levels) - 1)
            block = np.empty_like(prev)
            block[:half] = prev[:half]
            np.maximum(prev[half:], prev[:-half], out=block[half:])
            self.levels.append(block)
        return self.levels[k]

    def previous(self, at: np.ndarray, first: np.ndarray) -> np.ndarray:
        """Per position i: the largest j in [first[i], i) with held[j] >= at[i], else -1 (`first`: each
        position's block start, blocks contiguous). The position just before answers most (a first child, an
        op still open); the others skip back over blocks that hold nothing reaching `at`: the blocks of up to
        2**NEAR first (an op's parent is a few positions back), the larger ones only where those all fell short."""
        held = self.levels[0]
        out = np.arange(-1, len(at) - 1)
        inside = out >= first  # the position just before is in the same block
        near = np.zeros(len(at), np.bool_)
        np.greater_equal(held[:-1], at[1:], out=near[1:])  # held[i - 1] >= at[i]
        near &= inside
        todo = np.flatnonzero(inside & ~near)
        out[~near] = -1
        todo = todo[~(running_max(held, first)[todo - 1] < at[todo])]  # the rest: nothing before reaches
        p, reach, lo = todo - 2, at[todo], first[todo]  # held[i - 1] is short: search from i - 2
        self._skip(p, reach, lo, min(NEAR, self.top))
        far = np.flatnonzero((p >= lo) & (held[np.maximum(p, 0)] < reach))  # skipped all 2**(NEAR + 1) - 1
        if len(far):
            further = p[far]
            self._skip(further, reach[far], lo[far], self.top)
            p[far] = further
        out[todo] = np.where(p >= lo, p, -1)
        return out

    def _skip(self, p: np.ndarray, reach: np.ndarray, lo: np.ndarray, top: int) -> None:
        """Step each p back (in place) over the blocks of 2**top down to 1 that fit above lo and hold nothing
        reaching `reach`: it ends on the latest position at or before p that reaches, if it is fewer than
        2**(top + 1) back, else 2**(top + 1) - 1 back (or at lo - 1)."""
        for k in range(top, -1, -1):  # every position each step: no subset gathered
            size = 1 << k
            short = (p - size + 1 >= lo) & (self._level(k)[np.maximum(p, 0)] < reach)
            np.subtract(p, size, out=p, where=short)


class _Laid:
    """Spans laid out by thread, each thread's in nesting order: `order` (positions in the given spans),
    per laid position its start, held (end + EPS) and opened link, and where each thread's run is
    (`bounds`); `up` (the parent links) when asked for. What a lookup does not need (the running maxima,
    a thread code per position) is not kept: a whole model's forward has hundreds of thousands of ops."""

    def __init__(self, spans: Spans, with_parents: bool = False):
        nested = nesting_order(spans)  # over all threads
        self.order = nested[by_code(spans.thread[nested])]
        thread = spans.thread[self.order]
        runs = np.flatnonzero(np.concatenate(([True], thread[1:] != thread[:-1])))  # where each thread starts
        first = np.repeat(runs, np.diff(np.append(runs, len(thread))))
        self.starts, ends = spans.ts[self.order], spans.end[self.order]
        self.held = ends + EPS
        reach = Reach(self.held)
        self.opened = reach.previous(self.starts, first).astype(np.int32)
        self.up = None
        if with_parents:  # where every op's opened link also holds its end, that link is its parent
            self.up = self.opened if self._opened_hold_ends(ends) else reach.previous(ends, first).astype(np.int32)
        self.order = self.order.astype(np.int32)
        self.threads = spans.threads
        codes = distinct(thread)
        lo, hi = np.searchsorted(thread, codes, side="left").tolist(), np.searchsorted(thread, codes, side="right")
        self.bounds = {c: (a, b) for c, a, b in zip(codes.tolist(), lo, hi.tolist(), strict=True)}

    def _opened_hold_ends(self, ends: np.ndarray) -> bool:
        """Whether each span's opened link (the latest earlier one reaching its start) reaches its end too.
        Then it is also the latest earlier span reaching the end (every span between them ends before the
        start, so before the end; it needs end >= start, checked): the parent links are the opened ones."""
        linked = self.opened >= 0
        return bool(np.all(ends >= self.starts) and np.all(self.held[self.opened[linked]] >= ends[linked]))

    def run_of(self, event: Event) -> tuple[int, int]:
        """Where the spans of `event`'s thread are laid ((0, 0): a thread with none)."""
        return self.bounds.get(self.threads.get((event.pid, event.tid), -1), (0, 0))

    def holding(self, event: Event) -> list[int]:
        """Where the spans that hold `event` on its thread are (positions in the given spans), outermost
        first: from the last to start at or before it, the opened links."""
        return self.holding_each([event])[0]

    def holding_each(self, events: list[Event]) -> list[list[int]]:
        """`holding` of each of `events`, all of them at once: every event steps down its opened links
        together, one array step per level of nesting."""
        ts = np.array([e.ts for e in events], np.float64)
        return self._holding([self.run_of(e) for e in events], ts, ts + np.array([e.dur for e in events], np.float64))

    def holding_rows(self, cols: Columns, rows: np.ndarray) -> list[list[int]]:
        """`holding_each` of the events at `rows` of the trace's columns (none made)."""
        runs = {c: self.bounds.get(self.threads.get(cols.threads[c], -1), (0, 0))
                for c in distinct(cols.thread[rows]).tolist()}
        ts = cols.ts[rows]
        return self._holding(list(map(runs.__getitem__, cols.thread[rows].tolist())), ts, ts + cols.dur[rows])

    def _holding(self, runs: list[tuple[int, int]], ts: np.ndarray, stop: np.ndarray) -> list[list[int]]:
        """Per event (its thread's run of spans, start, end): the spans holding it, outermost first."""
        runs = np.array(runs, np.int64).reshape(-1, 2)
        lo, hi = runs[:, 0], runs[:, 1]
        j = np.full(len(ts), -1, np.int64)
        known = hi > lo
        for start in distinct(lo[known]).tolist():  # the last span of the thread to start at or before each
            mine = np.flatnonzero(known & (lo == start))
            j[mine] = start + np.searchsorted(self.starts[start:hi[mine[0]]], ts[mine], side="right") - 1
        found_event, found_at = [], []
        todo = np.flatnonzero(j >= lo)
        while len(todo):
            k = j[todo]
            held = self.held[k] >= stop[todo]
            found_event.append(todo[held])
            found_at.append(self.order[k[held]])
            j[todo] = self.opened[k]
            todo = todo[j[todo] >= lo[todo]]
        which = np.concatenate(found_event) if found_event else np.zeros(0, np.int64)
        at = np.concatenate(found_at) if found_at else np.zeros(0, np.int64)
        by = np.argsort(which, kind="stable")  # per event, innermost first
        bounds = np.searchsorted(which[by], np.arange(len(ts) + 1)).tolist()
        at = at[by].tolist()
        return [at[bounds[i]:bounds[i + 1]][::-1] for i in range(len(ts))]

    def enclosing(self, event: Event, ops: Sequence[Event]) -> list[Event]:
        """The ops of `ops` (the given spans' events) that hold `event`, outermost first, less `event` itself."""
        return [op for op in take(ops, self.holding(event)) if op is not event]


def open_parents(ts: list[float], dur: list[float]) -> list[int]:
    """For spans of one thread sorted by start: the index of the latest earlier span still open at each start."""
    starts = np.asarray(ts, np.float64)
    held = starts + np.asarray(dur, np.float64) + EPS
    return Reach(held).previous(starts, np.zeros(len(starts), np.int64)).tolist()


class OpIndex:
    """Which cpu_ops enclose a given host event, over a whole trace. Laid out on first use, so an analysis
    that never asks pays nothing; a lookup follows the opened links: it costs the nesting depth."""

    def __init__(self, ops: Sequence[Event], sealed: Iterable[Any] = (), spans: Callable[[], Spans] | None = None):
        self._ops = ops
        self._spans = spans  # makes the ops' columns, when they can be cut from the trace's
        self._laid: _Laid | None = None
        self._sealed = {id(f): f for f in sealed}

    def seals(self, forward: Any) -> bool:
        """Whether no op here outside `forward`'s cpu_ops overlaps its region on its process, so that
        the ops enclosing an event of the region are all the forward's own (`analyze_trace` says so
        for the forwards it makes, when true)."""
        return self._sealed.get(id(forward)) is forward

    @property
    def ops(self) -> Sequence[Event]:
        return self._ops

    def chain(self, event: Event) -> list[Event]:
        """The cpu_ops that enclose `event` on its thread, outermost first."""
        return self.laid.enclosing(event, self._ops)

    @property
    def laid(self) -> _Laid:
        if self._laid is None:
            self._laid = _Laid(self._spans() if self._spans is not None else spans_of(self._ops))
        return self._laid


class OpTree:
    """Host-op nesting inside one forward: per thread, in nesting order, an op's parent is the latest
    earlier op of the thread that it ends within (EPS). Ops outside the forward are not in it."""

    def __init__(self, ops: Sequence[Event], spans: Spans | None = None):
        self.ops = ops  # the forward's cpu_ops; `spans`: their columns, when already at hand
        spans = spans if spans is not None else spans_of(ops)
        laid = self._laid = _Laid(spans, with_parents=True)
        up, laid.up = laid.up, None
        self.clean = bool(np.array_equal(up, laid.opened))
        linked = up >= 0
        kids, parents = laid.order[linked], laid.order[up[linked]]  # by thread, each in nesting order
        self._parent = np.full(len(ops), -1, np.int32)  # by position in `ops`
        self._parent[kids] = parents
        self._kids = kids[np.argsort(parents, kind="stable")]  # by parent, each's in nesting order
        kids_of = np.bincount(parents, minlength=len(ops))  # per op, how many children
        self._first_kid = np.concatenate(([0], np.cumsum(kids_of))).astype(np.int32)
        roots = np.flatnonzero(self._parent < 0)  # in nesting order over all threads, as the lexsort ranks ops
        self._roots = roots[nesting_order(spans.take(roots))].astype(np.int32)

    def _find(self, op: Event) -> int:
        """Where `op` is in `ops` (found by its start on its thread, not by a table of every op); -1 when
        not there."""
        laid, ops = self._laid, self.ops
        lo, hi = laid.run_of(op)
        i = lo + int(np.searchsorted(laid.starts[lo:hi], op.ts, side="left"))
        while i < hi and laid.starts[i] == op.ts:
            if ops[laid.order[i]] is op:
                return int(laid.order[i])
            i += 1
        return -1

    def parent(self, op: Event) -> Event | None:
        i = self._find(op)
        j = -1 if i < 0 else self._parent[i]
        return self.ops[j] if j >= 0 else None

    def children(self, op: Event) -> list[Event]:
        """The ops whose parent is `op`, in nesting order."""
        i = self._find(op)
        return take(self.ops, self.kid_positions(i)) if i >= 0 else []

    def kid_positions(self, i: int) -> list[int]:
        """Where the children of `ops[i]` are in `ops`, in nesting order."""
        return self._kids[int(self._first_kid[i]) : int(self._first_kid[i + 1])].tolist()

    def kids_of(self, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The children of the ops at positions `at`, all at once: per child, which of `at` is its parent (by
        place in `at`) and where it is in `ops`; parent after parent, each's in nesting order."""
        owner, kid = ranges(self._first_kid[at], self._first_kid[at + 1])
        return owner, self._kids[kid]

    def outermost(self, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where a walk down from the roots that stops at each op with `stop` set (per position) stops: those
        ops, by position; and per op found, its root's place among `root_positions`. The walk goes a level
        at a time over the children's table, so it visits only what lies above the ops it stops at (a
        forward's top aten ops are a few percent of its ops; on big5m every root stops)."""
        found, roots = [], []
        frontier, root = self._roots, np.arange(len(self._roots))
        while len(frontier):
            stops = stop[frontier]
            found.append(frontier[stops])
            roots.append(root[stops])
            go = ~stops
            owner, kid = ranges(self._first_kid[frontier[go]], self._first_kid[frontier[go] + 1])
            frontier, root = self._kids[kid], root[go][owner]
        if not found:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        found_at = np.concatenate(found)
        by_position = np.argsort(found_at, kind="stable")
        return found_at[by_position].astype(np.int64), np.concatenate(roots)[by_position]

    @property
    def roots(self) -> list[Event]:
        """The ops with no parent, in nesting order."""
        return take(self.ops, self.root_positions)

    @property
    def root_positions(self) -> list[int]:
        """Where the ops with no parent are in `ops`, in nesting order."""
        return self._roots.tolist()

    def chain(self, op: Event) -> list[Event]:
        """Enclosing ops of `op`, outermost first (op itself excluded)."""
        i = self._find(op)
        return [self.ops[j] for j in self.chain_positions(i)] if i >= 0 else []

    def chain_positions(self, i: int) -> list[int]:
        """Where the enclosing ops of `ops[i]` are in `ops`, outermost first."""
        out, j = [], int(self._parent[i])
        while j >= 0:
            out.append(j)
            j = int(self._parent[j])
        return out[::-1]

    def enclosing(self, event: Event) -> list[Event]:
        """The ops that enclose `event` on its thread, outermost first, as `OpIndex.chain` finds them
        among these ops."""
        return self._laid.enclosing(event, self.ops)

    @property
    def laid(self) -> _Laid:
        return self._laid

    def parent_positions(self, at: list[int]) -> list[int]:
        """Where the parent of each of `ops[i]` for i in `at` is in `ops` (-1: a root)."""
        return self._parent[at].tolist()

