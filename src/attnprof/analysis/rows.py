"""The host ops of an analysis as rows of the trace's columns, each made into an `Event` only when a rule
asks for it and kept from then on. The reader makes a new object per call (trace.events_at), so `Made`
keeps one per row: one op is one object for the analysis's life, which the queries' identity tests and
caches rely on, and the ops no rule asks about (most of a whole model's) are never made. Imports no torch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from attnprof.analysis.columns import names_of
from attnprof.trace.reader import Args, Event, Trace

_BLOCK = 4096  # rows made at a time when iterating
_FEW_AT = 16  # up to this many positions, names are looked up one by one


class Made:
    """The events of one trace made so far, by row."""

    def __init__(self, trace: Trace):
        self.trace = trace
        self._made: dict[int, Event] = {}
        self._row_of: dict[int, int] = {}  # id(event) -> row

    def take(self, rows: list[int]) -> list[Event]:
        """The events of `rows` (distinct), in order; those not made yet are made together."""
        made = self._made
        missing = [r for r in rows if r not in made]
        if missing:
            events = self.trace.events_at(missing)
            made.update(zip(missing, events, strict=True))
            self._row_of.update(zip(map(id, events), missing, strict=True))
        return list(map(made.__getitem__, rows))

    def one(self, row: int) -> Event:
        found = self._made.get(row)
        return found if found is not None else self.take([row])[0]

    def row_of(self, event: Event) -> int | None:
        """The row of an event made here; None for any other."""
        row = self._row_of.get(id(event))
        return row if row is not None and self._made.get(row) is event else None


class OpRows(Sequence):
    """A read-only sequence of the events at `rows` (a forward's ops, an analysis's), made through `made`."""

    def __init__(self, made: Made, rows: np.ndarray):
        self.rows = rows
        self.made = made

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, at):  # type: ignore[override]
        if isinstance(at, slice):
            return self.made.take(self.rows[at].tolist())
        return self.made.one(int(self.rows[at]))

    def take(self, at: list[int]) -> list[Event]:
        """The events at positions `at` (distinct), made together."""
        return self.made.take(self.rows[at].tolist()) if len(at) else []

    def names_at(self, at: list[int]) -> list[str]:
        """The names of the events at positions `at` (from the name codes: none made)."""
        cols = self.made.trace.columns
        if len(at) <= _FEW_AT:  # a chain of a few ops: element by element beats making index arrays
            rows, codes = self.rows, cols.name
            return [cols.names[codes[rows[i]]] for i in at]
        return names_of(cols.names, cols.name[self.rows[at]].tolist())

    def args_at(self, at: list[int]) -> list[Args | None]:
        """The args of the events at positions `at`, less the correlation (the trace's shared sets: none made)."""
        cols = self.made.trace.columns
        sets = cols.arg_sets
        return [sets[code] if code >= 0 else None for code in cols.args[self.rows[at]].tolist()]  # -1: none

    def __iter__(self) -> Iterator[Event]:
        for first in range(0, len(self.rows), _BLOCK):
            yield from self.made.take(self.rows[first : first + _BLOCK].tolist())

    def __repr__(self) -> str:
        return f"<{len(self)} ops, made from their rows>"


def take(ops: Sequence[Event], at: list[int]) -> list[Event]:
    """`[ops[i] for i in at]`, the events made together where `ops` makes them from rows."""
    return ops.take(at) if isinstance(ops, OpRows) else list(map(ops.__getitem__, at))


def subset(ops: Sequence[Event], at: list[int]) -> Sequence[Event]:
    """The events at positions `at` of `ops`, as a sequence of their own: still rows, each made when read,
    where `ops` makes its events from rows (a hand-written call's chain: its rules read one op of it)."""
    return OpRows(ops.made, ops.rows[np.asarray(at, np.intp)]) if isinstance(ops, OpRows) else take(ops, at)


def runs(ops: Sequence[Event], at: list[int] | np.ndarray, bounds: list[tuple[int, int]]) -> list[Sequence[Event]]:
    """`subset(ops, at[lo:hi])` for each (lo, hi) of `bounds` (a forward's hand-written calls among its top
    ops): where `ops` are rows, the rows at `at` gathered once and each run a view of them."""
    if not isinstance(ops, OpRows):
        return [take(ops, list(at[lo:hi])) for lo, hi in bounds]
    rows = ops.rows[np.asarray(at, np.intp)]
    return [OpRows(ops.made, rows[lo:hi]) for lo, hi in bounds]


def names_at(ops: Sequence[Event], at: list[int]) -> list[str]:
    """`[ops[i].name for i in at]`, from the name codes where `ops` makes its events from rows."""
    return ops.names_at(at) if isinstance(ops, OpRows) else [ops[i].name for i in at]


def args_at(ops: Sequence[Event], at: list[int]) -> list[Args | None]:
    """`[ops[i].args for i in at]`, from the trace's table of args where `ops` makes its events from rows
    (less the correlation, which host ops do not carry)."""
    return ops.args_at(at) if isinstance(ops, OpRows) else [ops[i].args for i in at]


def args_each(each: list[Sequence[Event]], at: list[int]) -> list[Args | None]:
    """`args_at(ops, [i])[0]` for each `ops` of `each` and its `i` of `at` (a softmax in each hand-written
    call): those made from rows read in one gather."""
    out: list[Args | None] = [None] * len(each)
    by_rows = [k for k, ops in enumerate(each) if isinstance(ops, OpRows)]
    for k in sorted(set(range(len(each))) - set(by_rows)):
        out[k] = each[k][at[k]].args
    if by_rows:
        cols = each[by_rows[0]].made.trace.columns  # one analysis: one trace
        codes = cols.args[np.array([each[k].rows[at[k]] for k in by_rows], np.int64)].tolist()
        for k, code in zip(by_rows, codes, strict=True):
            out[k] = cols.arg_sets[code] if code >= 0 else None
    return out


def first_starts(each: list[Sequence[Event]]) -> list[float | None]:
    """Per sequence of `each`: the start of its first event (None: it is empty), from the trace's columns
    where it is made from rows (no event made)."""
    return [None if not len(ops) else float(ops.made.trace.columns.ts[ops.rows[0]]) if isinstance(ops, OpRows)
            else ops[0].ts for ops in each]


def first_threads(each: list[Sequence[Event]]) -> list[tuple | None]:
    """Per sequence of `each`: the (pid, tid) of its first event (None: it is empty), read as
    `Trace.events_at` reads them, from the trace's columns where it is made from rows (no event made)."""
    def thread(ops: Sequence[Event]) -> tuple | None:
        if not len(ops):
            return None
        if not isinstance(ops, OpRows):
            return ops[0].pid, ops[0].tid
        cols, row = ops.made.trace.columns, ops.rows[0]
        return cols.pids[cols.pid[row]], cols.threads[cols.thread[row]][1]
    return list(map(thread, each))
