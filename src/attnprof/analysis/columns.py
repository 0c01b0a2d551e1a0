"""Spans of events as columns (start, duration, end, thread), for the questions asked of every host op of a
forward at once (is it in the backward? which ops hold it?), answered with array operations instead of one
Python call per op; `analysis.queries` cuts them from the trace's columns once per forward. Imports no torch.

Times stay float64 and are combined in the order the per-op code used (`ts + dur`, then `+ EPS`), so that
every comparison gives the same answer as before, bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import count
from operator import attrgetter

import numpy as np

from attnprof.trace.columns import Columns
from attnprof.trace.reader import Event

_TS, _DUR, _THREAD = attrgetter("ts"), attrgetter("dur"), attrgetter("pid", "tid")


@dataclass(frozen=True)
class Spans:
    """Events as columns: start, duration, end (start + duration) and a code per (pid, tid) thread."""

    ts: np.ndarray
    dur: np.ndarray
    end: np.ndarray
    thread: np.ndarray  # int codes into `threads`
    threads: dict[tuple, int]

    def __len__(self) -> int:
        return len(self.ts)

    def take(self, at: np.ndarray | list[int]) -> Spans:
        return Spans(self.ts[at], self.dur[at], self.end[at], self.thread[at], self.threads)


def spans_of(events: Sequence[Event]) -> Spans:
    """Columns of some events (the top ops of a forward; the ops of a forward made by hand): a thread's
    code is where its first event is."""
    ts = np.fromiter(map(_TS, events), np.float64, len(events))
    dur = np.fromiter(map(_DUR, events), np.float64, len(events))
    threads: dict[tuple, int] = {}
    thread = np.fromiter(map(threads.setdefault, map(_THREAD, events), count()), np.int64, len(events))
    return Spans(ts, dur, ts + dur, thread, threads)


def thread_codes(cols: Columns) -> dict[tuple, int]:
    """The code of each (pid, tid) thread of a trace's columns."""
    return {t: i for i, t in enumerate(cols.threads)}


def spans_at(cols: Columns, rows: np.ndarray, threads: dict[tuple, int]) -> Spans:
    """The spans of the events at `rows` of a trace's columns (`threads`: their `thread_codes`)."""
    ts, dur = cols.ts[rows], cols.dur[rows]
    return Spans(ts, dur, ts + dur, cols.thread[rows], threads)


def nesting_order(spans: Spans) -> np.ndarray:
    """`np.lexsort((-spans.dur, spans.ts))`: by start, at equal starts the longer first, full ties in the given
    order. Spans already by start (a forward's ops, cut from the trace's op rows sorted by start) are only
    reordered within their runs of equal starts, not sorted again whole."""
    ts, dur = spans.ts, spans.dur
    if not np.all(ts[1:] >= ts[:-1]):  # also where a start is NaN
        return np.lexsort((-dur, ts))
    order = np.arange(len(ts))
    tied = np.flatnonzero(ts[1:] == ts[:-1])
    if len(tied):
        in_run = np.zeros(len(ts), np.bool_)
        in_run[tied], in_run[tied + 1] = True, True
        runs = np.flatnonzero(in_run)  # the runs of equal starts, each sorted in its place
        order[runs] = runs[np.lexsort((-dur[runs], ts[runs]))]
    return order


def by_code(codes: np.ndarray) -> np.ndarray:
    """`np.argsort(codes, kind="stable")` for codes that fit in 16 bits (threads), sorted as int16: numpy sorts
    those by radix, in one pass, not by merging."""
    small = len(codes) and int(codes.min()) >= np.iinfo(np.int16).min and int(codes.max()) <= np.iinfo(np.int16).max
    return np.argsort(codes.astype(np.int16) if small else codes, kind="stable")


def running_max(held: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Per position i: the max of held[first[i] : i + 1], `first` being each position's block start (blocks
    contiguous: a thread's run). `Reach.previous` answers -1 at once where it is below the time asked (a root
    of a tree, about half of the positions that search); a NaN stays searched."""
    upto = np.empty_like(held)
    bounds = [*np.flatnonzero(first == np.arange(len(first))).tolist(), len(held)]  # where blocks start, the end
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        np.maximum.accumulate(held[lo:hi], out=upto[lo:hi])
    return upto


def ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every index of the ranges [lo[k], hi[k]) with the k of its range, range after range: the gather of
    ragged runs (the launches starting in each op, the children of each op) as two arrays, no loop."""
    size = hi - lo
    owner = np.repeat(np.arange(len(lo)), size)
    return owner, np.arange(len(owner)) - np.repeat(np.cumsum(size) - size, size) + np.repeat(lo, size)


def names_of(names: Sequence[str], codes: list[int]) -> list[str]:
    """`[names[c] for c in codes]`, each distinct name looked up once (a trace's table of names answers
    each lookup in Python; a forward asks for the names of tens of thousands of ops, most of them alike)."""
    table = {c: names[c] for c in set(codes)}
    return list(map(table.__getitem__, codes))


def distinct(values: np.ndarray) -> np.ndarray:
    """`np.unique(values)`, sorted, without numpy 2's plain `np.unique`, whose masked-array check imports
    numpy.ma (1.3 MB of resident memory, a tenth of what a 50 MB trace's analysis may hold)."""
    ordered = np.sort(values, kind="stable")
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if len(ordered) else ordered


def held_by(outer: Spans, inner: Spans, eps: float) -> np.ndarray:
    """Per span of `inner`: whether the latest span of `outer` on its thread to start at or before it
    (`outer` by start within each thread, none inside another) also holds its end (within `eps`)."""
    out = np.zeros(len(inner), np.bool_)
    for key, code in outer.threads.items():
        theirs = inner.threads.get(key)
        if theirs is None:
            continue
        mine_out = outer.thread == code
        mine_in = np.flatnonzero(inner.thread == theirs)
        starts, ends = outer.ts[mine_out], outer.end[mine_out] + eps
        j = np.searchsorted(starts, inner.ts[mine_in], side="right") - 1
        ok = j >= 0
        hit = np.zeros(len(mine_in), np.bool_)
        hit[ok] = inner.end[mine_in[ok]] <= ends[j[ok]]
        out[mine_in] = hit
    return out


@dataclass(frozen=True)
class Hits:
    """Per span asked about (`launches.under_spans`), where the GPU activities launched inside it are in its
    forward's activities, in launch order: span i's are `where[bounds[i]:bounds[i + 1]]`. Two arrays, not
    a list per span: a training step's backward has tens of thousands of nodes per region."""

    where: np.ndarray
    bounds: np.ndarray

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __getitem__(self, i: int) -> list[int]:
        return self.where[self.bounds[i] : self.bounds[i + 1]].tolist()

    def every(self) -> list[int]:
        """The activities launched inside any of the spans, each once, in order."""
        return distinct(self.where).tolist()

    def owners(self) -> np.ndarray:
        """Per entry of `where`: the span it is a hit of."""
        return np.repeat(np.arange(len(self)), np.diff(self.bounds))

    def any_of(self, flags: np.ndarray) -> np.ndarray:
        """Per span: whether an activity launched inside it has its flag set (`flags`: per activity)."""
        return np.bincount(self.owners()[flags[self.where]], minlength=len(self)) > 0

    def merged(self, lo: np.ndarray, hi: np.ndarray, keep: np.ndarray | None = None) -> Hits:
        """Per group k of the spans lo[k]..hi[k] - 1 (a call of several ops): the activities launched inside
        any of them, each once, in order; only those whose `keep` flag (per activity) is set, when given."""
        group, at = ranges(self.bounds[lo], self.bounds[hi])
        values = self.where[at]
        order = np.lexsort((values, group))
        group, values = group[order], values[order]
        new = np.ones(len(values), np.bool_)
        new[1:] = (values[1:] != values[:-1]) | (group[1:] != group[:-1])
        if keep is not None:
            new &= keep[values]
        group, values = group[new], values[new]
        return Hits(values, np.searchsorted(group, np.arange(len(lo) + 1)))
