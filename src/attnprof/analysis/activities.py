"""A forward's GPU activities as rows of the trace's columns, each made into an `Activity` only when a rule
asks for it and kept from then on; and the columns of a forward's activities, which the rules that look at
every activity (counts, times, tables by name) read instead. A whole-model trace has 100k+ activities and
most rules want a handful of them. Imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import msgspec
import numpy as np

from attnprof.analysis.columns import distinct, names_of
from attnprof.trace.columns import Columns
from attnprof.trace.reader import Args, Event, Trace

_BLOCK = 4096  # activities made at a time when iterating
KINDS = ("kernel", "memcpy", "memset")
KIND_OF_CATEGORY = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
DRIVER = "cuda_driver"  # the category of driver-API launches (cuLaunchKernel); the runtime's is cuda_runtime


class Activity(msgspec.Struct, frozen=True, gc=False):
    """A GPU activity joined to the host event that launched it (a struct: a trace has thousands)."""

    event: Event
    kind: str  # kernel | memcpy | memset
    launch: Event | None


class MadeActivities:
    """The activities of one trace made so far: one object per activity for the analysis's life (the
    queries' caches go by identity), a launch one object for all the activities it started. Kept in
    arrays by place among the trace's GPU rows and launch rows (8 bytes each; a dict would hold an int
    key per object besides)."""

    def __init__(self, trace: Trace, gpu_rows: np.ndarray, launch_rows: np.ndarray):
        self.trace = trace
        self._gpu_rows, self._launch_rows = gpu_rows, launch_rows  # both ascending
        self._acts = np.full(len(gpu_rows), None, object)
        self._launches = np.full(len(launch_rows), None, object)
        self._kind = [KIND_OF_CATEGORY.get(c) for c in trace.columns.cats]

    def take(self, rows: np.ndarray, launches: np.ndarray) -> list[Activity]:
        """The activities of GPU rows `rows` (distinct) launched by rows `launches` (-1: none), in order."""
        at = np.searchsorted(self._gpu_rows, rows)
        found = self._acts[at].tolist()
        missing = [i for i, x in enumerate(found) if x is None]
        if missing:
            new, launched = rows[missing], launches[missing]
            self._make_launches(launched[launched >= 0])
            slot = np.searchsorted(self._launch_rows, launched).tolist()
            launch = [self._launches[s] if r >= 0 else None for s, r in zip(slot, launched.tolist(), strict=True)]
            kinds = map(self._kind.__getitem__, self.trace.columns.cat[new].tolist())
            made = list(map(Activity, self.trace.events_at(new.tolist()), kinds, launch))
            self._acts[at[missing]] = made
            for i, act in zip(missing, made, strict=True):
                found[i] = act
        return found

    def _make_launches(self, rows: np.ndarray) -> None:
        slot = distinct(np.searchsorted(self._launch_rows, rows))
        slot = slot[[x is None for x in self._launches[slot].tolist()]]
        if len(slot):
            self._launches[slot] = self.trace.events_at(self._launch_rows[slot].tolist())


class ActivityRows(Sequence):
    """A read-only sequence of a forward's activities: GPU rows `gpu`, launched by rows `launch` (-1: none);
    `columns` their GpuColumns (views of the analysis's, which holds every forward's activities; a subset's
    are picked from its forward's when asked, not kept: an attention call's GPU work is a subset)."""

    def __init__(self, made: MadeActivities, gpu: np.ndarray, launch: np.ndarray, columns: GpuColumns,
                 picked: np.ndarray | None = None, at: np.ndarray | None = None):
        self.made, self._gpu, self._launch = made, gpu, launch  # `at`: this subset's positions in them
        self._columns, self._picked, self._at = columns, picked, at  # `picked`: where these are in `columns`

    @property
    def gpu(self) -> np.ndarray:
        """The GPU rows (a subset's taken when asked: an attention call keeps its positions alone)."""
        return self._gpu if self._at is None else self._gpu[self._at]

    @property
    def launch(self) -> np.ndarray:
        return self._launch if self._at is None else self._launch[self._at]

    @property
    def columns(self) -> GpuColumns:
        return self._columns if self._picked is None else self._columns.pick(self._picked)

    @property
    def dur(self) -> np.ndarray:
        """The activities' durations alone (a subset's picked without the other columns)."""
        return self._columns.dur if self._picked is None else self._columns.dur[self._picked]

    def __len__(self) -> int:
        return len(self._gpu if self._at is None else self._at)

    def __getitem__(self, at):  # type: ignore[override]
        if isinstance(at, slice):
            return self.made.take(self.gpu[at], self.launch[at])
        return self.take([at])[0]

    def subset(self, at: list[int]) -> ActivityRows:
        """The activities at positions `at`, still as rows (an attention call's GPU work)."""
        at = np.asarray(at, np.intp)
        if self._at is not None or self._picked is not None:  # a subset of a subset: its own rows
            return ActivityRows(self.made, self.gpu[at], self.launch[at], self._columns,
                                at if self._picked is None else self._picked[at])
        return ActivityRows(self.made, self._gpu, self._launch, self._columns, at, at)

    def take(self, at: list[int]) -> list[Activity]:
        """The activities at positions `at` (distinct), made together."""
        return self.made.take(self.gpu[at], self.launch[at]) if len(at) else []

    def __iter__(self) -> Iterator[Activity]:
        for first in range(0, len(self.gpu), _BLOCK):
            yield from self[first : first + _BLOCK]

    def __repr__(self) -> str:
        return f"<{len(self)} GPU activities, made from their rows>"


def subset(acts: Sequence[Activity], at: list[int]) -> Sequence[Activity]:
    """The activities at positions `at`: rows where `acts` are rows, else a list."""
    return acts.subset(at) if isinstance(acts, ActivityRows) else [acts[i] for i in at]


def gpu_columns(acts: Sequence[Activity]) -> GpuColumns:
    """The columns of `acts` (their own where they are rows, else coded from the events)."""
    return acts.columns if isinstance(acts, ActivityRows) else columns_of_events(acts)


def gpu_durations(acts: Sequence[Activity]) -> np.ndarray:
    """`gpu_columns(acts).dur`, without picking the other columns where `acts` are rows."""
    return acts.dur if isinstance(acts, ActivityRows) else columns_of_events(acts).dur


def kernel_names(each: list[Sequence[Activity]]) -> list[list[str]]:
    """`gpu_columns(acts).names_at(all of them)` for each of `each` (the calls of a forward)."""
    return gathered(each, GpuColumns.names_at)


def gathered(each: list[Sequence[Activity]], read: Callable[[GpuColumns, np.ndarray], list]) -> list[list]:
    """`read(gpu_columns(acts), all of their positions)` for each of `each` (the calls of a forward): the
    subsets of one forward's rows read in one call for all of them, not a pick and a read per call."""
    out: list[list | None] = [None] * len(each)
    groups: dict[int, list[int]] = {}
    for k, acts in enumerate(each):
        if isinstance(acts, ActivityRows) and acts._picked is not None:
            groups.setdefault(id(acts._columns), []).append(k)
        else:
            cols = gpu_columns(acts)
            out[k] = read(cols, np.arange(len(cols.name)))
    for ks in groups.values():
        picked = [each[k]._picked for k in ks]
        values = read(each[ks[0]]._columns, np.concatenate(picked))
        ends = np.cumsum([len(p) for p in picked]).tolist()
        for k, lo, hi in zip(ks, [0, *ends], ends, strict=False):
            out[k] = values[lo:hi]
    return out  # type: ignore[return-value]


def take_activities(acts: Sequence[Activity], at: list[int]) -> list[Activity]:
    """`[acts[i] for i in at]`, made together where `acts` makes them from rows."""
    return acts.take(at) if isinstance(acts, ActivityRows) else list(map(acts.__getitem__, at))


@dataclass(frozen=True)
class GpuColumns:
    """One forward's activities as columns: codes into `names` (the trace's, or the forward's own for one
    made from events), `KINDS` and `arg_sets` (its last entry None: code -1, no args)."""

    name: np.ndarray
    names: Sequence[str]
    kind: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    args: np.ndarray
    arg_sets: Sequence[Args | None]
    launch_name: np.ndarray  # -1: no launch
    launch_driver: np.ndarray  # launched through the driver API

    def cut(self, lo: int, hi: int) -> GpuColumns:
        """The activities `lo:hi`, as views of these columns (no copy)."""
        return GpuColumns(self.name[lo:hi], self.names, self.kind[lo:hi], self.ts[lo:hi], self.dur[lo:hi],
                          self.args[lo:hi], self.arg_sets, self.launch_name[lo:hi], self.launch_driver[lo:hi])

    def pick(self, at: list[int]) -> GpuColumns:
        """The activities at positions `at` (a copy of those)."""
        at = np.asarray(at, np.intp)
        return GpuColumns(self.name[at], self.names, self.kind[at], self.ts[at], self.dur[at], self.args[at],
                          self.arg_sets, self.launch_name[at], self.launch_driver[at])

    def names_at(self, at: list[int]) -> list[str]:
        """The names of the activities at positions `at`."""
        return names_of(self.names, self.name[at].tolist()) if len(at) else []

    def named(self, test: Callable[[str], bool], table: np.ndarray | None = None) -> np.ndarray:
        """Per activity: whether its name passes `test` (`table`: the test of every name, when known)."""
        if table is None:
            table = np.fromiter(map(test, self.names), np.bool_, len(self.names))
        return table[self.name] if len(self.name) else np.zeros(0, np.bool_)


def columns_of_rows(cols: Columns, gpu: np.ndarray, launch: np.ndarray) -> GpuColumns:
    """The columns of the activities at GPU rows `gpu` launched by rows `launch`, cut from the trace's."""
    kind_of_cat = np.array([KINDS.index(KIND_OF_CATEGORY[c]) if c in KIND_OF_CATEGORY else -1 for c in cats]
                           if (cats := list(cols.cats)) else [], np.int8)
    driver = cols.code("cats", DRIVER)
    launched = launch >= 0
    launch_name = np.where(launched, cols.name[launch], -1).astype(np.int32)
    return GpuColumns(cols.name[gpu], cols.names, kind_of_cat[cols.cat[gpu]], cols.ts[gpu], cols.dur[gpu],
                      cols.args[gpu], [*cols.arg_sets, None], launch_name, launched & (cols.cat[launch] == driver))


def columns_of_events(acts: Sequence[Activity]) -> GpuColumns:
    """The same columns for activities made from events (a forward cut from another's), names coded here."""
    codes: dict[str, int] = {}
    sets: dict[int, int] = {}
    arg_sets: list[Args | None] = []

    def arg_code(args: Args | None) -> int:
        if args is None:
            return -1
        if id(args) not in sets:
            sets[id(args)] = len(arg_sets)
            arg_sets.append(args)
        return sets[id(args)]
    name = [codes.setdefault(x.event.name, len(codes)) for x in acts]
    launch_name = [codes.setdefault(x.launch.name, len(codes)) if x.launch is not None else -1 for x in acts]
    return GpuColumns(np.array(name, np.int64), list(codes), np.array([KINDS.index(x.kind) for x in acts], np.int64),
                      np.array([x.event.ts for x in acts]), np.array([x.event.dur for x in acts]),
                      np.array([arg_code(x.event.args) for x in acts], np.int64), [*arg_sets, None],
                      np.array(launch_name, np.int64),
                      np.array([x.launch is not None and x.launch.cat == DRIVER for x in acts], np.bool_))


@dataclass(frozen=True)
class NamedGroups:
    """Positions grouped by name code, the groups first seen first, each's positions in order: kept as
    arrays, not as a dict of a str and an array per name (a trace whose kernels all have names of their
    own has 100k+ names); `items()` makes each (name, positions) as it is asked for."""

    names: Sequence[str]
    codes: np.ndarray  # per group, its name code
    positions: np.ndarray  # group after group
    bounds: np.ndarray  # group g: positions[bounds[g]:bounds[g + 1]]

    def items(self) -> Iterator[tuple[str, np.ndarray]]:
        names, positions = self.names, self.positions
        for code, lo, hi in zip(self.codes.tolist(), self.bounds[:-1].tolist(), self.bounds[1:].tolist(),
                                strict=True):
            yield names[code], positions[lo:hi]


def named_groups(names: Sequence[str], codes: np.ndarray, positions: np.ndarray) -> NamedGroups:
    """`positions` grouped by their name `codes` (`first_seen_groups`' groups)."""
    if not len(codes):
        return NamedGroups(names, codes, positions, np.zeros(1, np.int64))
    distinct, first, inverse, counts = np.unique(codes, return_index=True, return_inverse=True, return_counts=True)
    rank = np.argsort(first, kind="stable")  # the groups, first seen first
    group = np.empty(len(rank), np.int64)
    group[rank] = np.arange(len(rank))
    order = np.argsort(group[inverse.reshape(-1)], kind="stable")
    return NamedGroups(names, distinct[rank], positions[order], np.concatenate(([0], np.cumsum(counts[rank]))))


def first_seen_groups(keys: np.ndarray) -> list[np.ndarray]:
    """The positions of each distinct key, in order; the groups in the order their keys first come."""
    if not len(keys):
        return []
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    groups = np.split(order, np.cumsum(np.bincount(inverse))[:-1])
    return [groups[g] for g in np.argsort(first, kind="stable").tolist()]
