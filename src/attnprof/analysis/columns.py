"""Questions asked of every host op of a forward at once (is it in the backward? is it an aten op?),
answered with array operations on the trace's columns (trace.columns) instead of one Python call per op.
Built once per forward or analysis and cached on the Analysis. Imports no torch.

Times stay float64 and are combined in the order the per-op code used (`ts + dur`, then `+ EPS`), so that
every comparison gives the same answer as before, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnprof.analysis.attribution import Analysis, Forward
from attnprof.analysis.queries import per
from attnprof.trace.columns import columns_of
from attnprof.trace.reader import Event


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


def spans_of(events: list[Event]) -> Spans:
    """Columns of a few events (a forward's launches; the ops of a forward made by hand)."""
    cols = columns_of(events)
    return Spans(cols.ts, cols.dur, cols.ts + cols.dur, cols.thread, {t: i for i, t in enumerate(cols.threads)})


def op_columns(a: Analysis, fwd: Forward) -> Spans:
    """The forward's cpu_ops as columns, cut from the trace's (built once per forward)."""
    def build(f: Forward) -> Spans:
        if f.rows is None:
            return spans_of(f.cpu_ops)
        cols = a.trace.columns
        ts, dur = cols.ts[f.rows], cols.dur[f.rows]
        return Spans(ts, dur, ts + dur, cols.thread[f.rows], _thread_codes(a))
    return per(a, "op columns", fwd, build)


def _thread_codes(a: Analysis) -> dict[tuple, int]:
    return per(a, "thread codes", a, lambda x: {t: i for i, t in enumerate(x.trace.columns.threads)})


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
