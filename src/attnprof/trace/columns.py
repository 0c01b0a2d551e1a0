"""The complete events of a trace as typed NumPy columns, aligned with `Trace.events`: start, duration,
category, name, process and thread, with each distinct category, name, process and
thread interned once into a code. The reader fills them piece by piece as it decodes, so the analysis
splits, sorts, joins and windows events with array operations instead of one Python call per event.
Imports no torch.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

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
    """Appends the columns of each decoded piece; `columns()` turns them into arrays without copying."""

    def __init__(self) -> None:
        self._ts, self._dur = array("d"), array("d")
        self._cat, self._name, self._pid, self._thread = array("i"), array("i"), array("i"), array("i")
        self._codes: tuple[dict, dict, dict, dict] = ({}, {}, {}, {})

    def add(self, events: list) -> None:
        cats, names, pids, threads = (d.setdefault for d in self._codes)
        c, n, p, t = self._codes
        self._ts.extend([e.ts for e in events])
        self._dur.extend([e.dur for e in events])
        self._cat.extend([cats(e.cat, len(c)) for e in events])
        self._name.extend([names(e.name, len(n)) for e in events])
        self._pid.extend([pids(e.pid, len(p)) for e in events])
        self._thread.extend([threads((e.pid, e.tid), len(t)) for e in events])

    def columns(self) -> Columns:
        arrays = [np.frombuffer(a, dtype) if len(a) else np.zeros(0, dtype) for a, dtype in (
            (self._ts, np.float64), (self._dur, np.float64), (self._cat, np.int32), (self._name, np.int32),
            (self._pid, np.int32), (self._thread, np.int32))]
        return Columns(*arrays, *(list(d) for d in self._codes))


def columns_of(events: list) -> Columns:
    """Columns of events made some other way than by the reader (tests, slices of an analysis)."""
    builder = ColumnBuilder()
    builder.add(events)
    return builder.columns()
