"""The complete events of a trace as typed NumPy columns, aligned with `Trace.events`: start, duration,
category, name, process and thread, with each distinct category, name, process and
thread interned once into a code. The reader fills them piece by piece as it decodes, so the analysis
splits, sorts, joins and windows events with array operations instead of one Python call per event.
Imports no torch.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from operator import attrgetter

import numpy as np


@dataclass(frozen=True)
class Columns:
    ts: np.ndarray  # float64, µs
    dur: np.ndarray  # float64, µs
    cat: np.ndarray  # int32 codes into `cats`
    name: np.ndarray  # int32 codes into `names`
    pid: np.ndarray  # int32 codes into `pids`
    thread: np.ndarray  # int32 codes into `threads`, (pid, tid)
    cats: list[str]
    names: list[str]
    pids: list[int | str]
    threads: list[tuple]

    def __len__(self) -> int:
        return len(self.ts)

    def code(self, table: str, value: object) -> int:
        """The code of `value` in table `table` ("cats", "names", ...); -1 when the trace has none."""
        found = getattr(self, table)
        return found.index(value) if value in found else -1


class ColumnBuilder:
    """Appends the columns of each decoded piece; `columns()` turns them into arrays without copying.
    Each column is filled by one C-level pass (`map`), none by a Python call per event."""

    def __init__(self) -> None:
        self._ts, self._dur = array("d"), array("d")
        self._cat, self._name, self._pid, self._tid = array("i"), array("i"), array("i"), array("i")
        self._tables: tuple[dict, dict, dict, dict] = ({}, {}, {}, {})  # cats, names, pids, tids

    def add(self, events: list) -> None:
        self._ts.extend(map(_TS, events))
        self._dur.extend(map(_DUR, events))
        cats, names, pids, tids = self._tables
        self._cat.extend(_coded(cats, list(map(_CAT, events))))
        self._name.extend(_coded(names, list(map(_NAME, events))))
        self._pid.extend(_coded(pids, list(map(_PID, events))))
        self._tid.extend(_coded(tids, list(map(_TID, events))))

    def columns(self) -> Columns:
        ts, dur, cat, name, pid, tid = (np.frombuffer(a, dtype) if len(a) else np.zeros(0, dtype) for a, dtype in (
            (self._ts, np.float64), (self._dur, np.float64), (self._cat, np.int32), (self._name, np.int32),
            (self._pid, np.int32), (self._tid, np.int32)))
        cats, names, pids, tids = (list(t) for t in self._tables)
        keys, thread = np.unique((pid.astype(np.int64) << 32) | tid, return_inverse=True)
        threads = [(pids[k >> 32], tids[k & 0xFFFFFFFF]) for k in keys.tolist()]
        return Columns(ts, dur, cat, name, pid, thread.astype(np.int32), cats, names, pids, threads)


_TS, _DUR, _CAT, _NAME, _PID, _TID = map(attrgetter, ("ts", "dur", "cat", "name", "pid", "tid"))


def _coded(table: dict, values: list) -> Iterator[int]:
    """The codes of `values` in `table`, new values added (each distinct value looked at once)."""
    for value in dict.fromkeys(values):  # first seen first, so that codes do not depend on hashing
        if value not in table:
            table[value] = len(table)
    return map(table.__getitem__, values)


def columns_of(events: list) -> Columns:
    """Columns of events made some other way than by the reader (tests, slices of an analysis)."""
    builder = ColumnBuilder()
    builder.add(events)
    return builder.columns()
