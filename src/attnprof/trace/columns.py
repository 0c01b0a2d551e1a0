"""The complete events of a trace as typed NumPy columns, one row per event in file order: start, duration,
category, name, process, thread, correlation id and the other args (a code into a table of shared `Args`).
Each distinct category, name, process, thread and set of args is interned once. The reader fills them
piece by piece as it decodes (trace/builder.py) and keeps no object per event; `Columns.event(row)` and
`events_at(rows)` make the `Event` of a row when one is asked for. Imports no torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from itertools import repeat

import msgspec
import numpy as np

from attnprof.trace.events import Args, Event
from attnprof.trace.names import Names

_NAMES_KEPT = 1 << 16  # up to this many distinct names, events share one str object per name


@dataclass(frozen=True)
class Columns:
    ts: np.ndarray  # float64, µs
    dur: np.ndarray  # float64, µs
    cat: np.ndarray  # int32 codes into `cats`
    name: np.ndarray  # int32 codes into `names`
    pid: np.ndarray  # int32 codes into `pids`
    thread: np.ndarray  # int32 codes into `threads`, (pid, tid)
    corr: np.ndarray  # `args.correlation`, -1 for none: int32 when every id fits (as Kineto's do), else int64
    args: np.ndarray  # int32 codes into `arg_sets`, -1 for an event without args
    cats: list[str]
    names: Names  # a sequence of str, kept compactly (a new str object per access)
    pids: list[int | str]
    threads: list[tuple]
    arg_sets: list[Args]  # each distinct set of args less the correlation (None there), shared by its events

    def __len__(self) -> int:
        return len(self.ts)

    def code(self, table: str, value: object) -> int:
        """The code of `value` in table `table` ("cats", "names", ...); -1 when the trace has none."""
        found = getattr(self, table)
        return found.index(value) if value in found else -1

    @cached_property
    def _names_as_str(self) -> list[str]:
        """The names as str objects, made once (only for a table of at most _NAMES_KEPT names)."""
        return list(self.names)

    @cached_property
    def _arg_objects(self) -> np.ndarray:
        """The args sets as an object array, None last (for code -1)."""
        out = np.empty(len(self.arg_sets) + 1, object)
        out[:-1] = self.arg_sets
        return out

    def event(self, row: int) -> Event:
        """The event of one row (a new object each call; equal strings and args shared)."""
        return self.events_at([row])[0]

    def events_at(self, rows: np.ndarray | list[int]) -> list[Event]:
        """The events of `rows`, in that order, made with a few C-level passes (those with a correlation id
        get args of their own: a copy of their shared set with it filled in)."""
        rows = np.asarray(rows, np.intp)
        cats, pids, codes = self.cats, self.pids, self.name[rows]
        if len(self.names) <= _NAMES_KEPT:
            names = self._names_as_str
        else:  # each distinct name made once per call
            named, codes = np.unique(codes, return_inverse=True)
            names = [self.names[code] for code in named.tolist()]
        tids = [t[1] for t in self.threads]
        corr, arg_codes = self.corr[rows], self.args[rows]
        args = self._arg_objects[arg_codes]  # code -1: the last, None
        if (has := corr != -1).any():
            sets, replace = self.arg_sets, msgspec.structs.replace
            args[has] = [replace(sets[k], correlation=c) for k, c in zip(arg_codes[has].tolist(), corr[has].tolist(),
                                                                         strict=True)]
        args = args.tolist()
        return list(map(Event, map(names.__getitem__, codes.reshape(-1).tolist()),
                        map(cats.__getitem__, self.cat[rows].tolist()), repeat("X"), self.ts[rows].tolist(),
                        self.dur[rows].tolist(), map(pids.__getitem__, self.pid[rows].tolist()),
                        map(tids.__getitem__, self.thread[rows].tolist()), args))


class EventRows:
    """`Trace.events` of a trace read from a file: a read-only sequence that makes each event from its row
    when asked. Asked for one row, it makes the events of the next rows of the same category at once and
    keeps them (one block per category), so that walking the rows of a category in order, as code written
    for a list of events does, costs a C-level pass per block, not a Python call per field. Prefer
    `Trace.events_at(rows)` or the columns themselves for anything over many rows."""

    _BLOCK = 1024

    def __init__(self, columns: Columns):
        self._columns = columns
        self._by_cat: list[np.ndarray] | None = None  # the rows of each category
        self._made: dict[int, dict[int, Event]] = {}  # per category: the last block made, by row

    def __len__(self) -> int:
        return len(self._columns)

    def __getitem__(self, at: int | slice) -> Event | list[Event]:
        cols = self._columns
        if isinstance(at, slice):
            return cols.events_at(range(*at.indices(len(cols))))
        if not -len(cols) <= at < len(cols):
            raise IndexError("event row out of range")
        row = at % len(cols)
        cat = int(cols.cat[row])
        made = self._made.get(cat)
        if made is None or row not in made:
            if self._by_cat is None:
                order = np.argsort(cols.cat, kind="stable").astype(np.int32)
                self._by_cat = np.split(order, np.cumsum(np.bincount(cols.cat, minlength=len(cols.cats)))[:-1])
            theirs = self._by_cat[cat]
            first = int(np.searchsorted(theirs, row))
            rows = theirs[first:first + self._BLOCK]
            made = self._made[cat] = dict(zip(rows.tolist(), cols.events_at(rows), strict=True))
        return made[row]

    def __iter__(self) -> Iterator[Event]:
        for first in range(0, len(self._columns), self._BLOCK):
            yield from self._columns.events_at(range(first, min(first + self._BLOCK, len(self._columns))))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (EventRows, list, tuple)) and len(other) == len(self) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<{len(self)} events, made from their rows>"
