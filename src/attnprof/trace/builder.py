"""Columns made from events, a batch at a time (the reader's pieces, another process's range, a list made
by hand): each column grows in place; each distinct category, name, process, thread and set of args is
coded once, in first-seen order. Imports no torch.
"""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter

import msgspec
import numpy as np

from attnprof.trace.columns import Columns
from attnprof.trace.events import CATEGORY_ALIASES, Args
from attnprof.trace.growing import Growing
from attnprof.trace.names import Names


@dataclass(frozen=True)
class Part:
    """What a builder holds, to be taken into another (a range read by another process): its arrays, coded
    into its tables (cats, pids, tids, threads as (pid, tid) codes, args keys) and names (`Names.part`: views
    of its buffers), and its args."""

    arrays: dict[str, np.ndarray]
    tables: tuple[list, ...]
    names: tuple[memoryview, memoryview, memoryview | None]
    arg_sets: list[Args]


class ColumnBuilder:
    """Appends the columns of each batch of events; `columns()` joins them. Each column of a batch is filled
    by one C-level pass (`map`), none by a Python call per event."""

    def __init__(self, share_args: Callable[[Args], Args] = lambda a: a):
        self._chunks = {k: Growing(dtype) for k, dtype in _COLUMNS.items()}
        self._names = Names()
        self._unnamed: list[str] = []  # the names of the last rows, to be coded in one batch (`_code_names`)
        # cats, pids, tids, threads (by pid and tid code); args by key (None's keys: code -1)
        self._tables: tuple[dict, ...] = ({}, {}, {}, {}, {b"null": -1, "None": -1})
        self._arg_sets: list[Args] = []
        self._share_args = share_args  # the table's Args for a new distinct set (the reader decodes raw lists)
        # each distinct event key (category, pid, tid, args key, and while names are few the name) seen: its
        # row of codes, found by one dict lookup an event; once names are many (all unique, say) they are
        # coded apart, in batches, and the keys (from then on without them) stay few
        self._keys: dict[tuple, int] = {}
        self._named_keys = True
        self._key_codes: list[tuple[int, int, int, int, int]] = []
        self._key_table = np.zeros((0, 5), np.int32)  # _key_codes as an array

    def add(self, events: list, decoded: bool = False) -> int:
        """Append `events`; return how many were dropped. `decoded`: fresh from the reader's decoder, so
        their args are the builder's to change (the correlation is taken out in place, else in a copy),
        and those the decoder gave no start or duration (its defaults NaN and -1) are dropped."""
        with _no_collections():
            return self._add(events, decoded)

    def _add(self, events: list, decoded: bool) -> int:
        name, cat, ts, dur, pid, tid, args = _fields(events, decoded)
        ts, dur = np.fromiter(ts, np.float64, len(ts)), np.fromiter(dur, np.float64, len(dur))
        dropped, usable = 0, (dur >= 0.0) & (ts == ts) if decoded else None
        if usable is not None and not usable.all():
            kept = usable.tolist()
            name, cat, pid, tid, args = (list(compress(column, kept)) for column in (name, cat, pid, tid, args))
            ts, dur = ts[usable], dur[usable]
            dropped = len(usable) - len(ts)
        put = self._chunks
        put["ts"].append(ts)
        put["dur"].append(dur)
        corr, some_null = _correlations(args)
        put["corr"].append(corr)
        args, arg_keys = _without_correlation(args, decoded, corr, some_null)
        named = self._named_keys
        parts = [cat, pid, tid, arg_keys]
        if named:
            parts.append(name)
        else:
            self._unnamed.extend(name)
            put["name"].extend(len(ts))  # written by `_code_names`
        keys = list(zip(*parts, strict=True))
        at = np.fromiter(map(self._keys.get, keys, repeat(-1)), np.intp, len(keys))
        new, known = np.flatnonzero(at < 0).tolist(), len(self._keys)
        if new:
            self._add_keys(keys, new, at, args)
        coded = _KEY_COLUMNS if named else _KEY_COLUMNS[:4]
        for key, column in zip(coded, self._key_table[at].T[:len(coded)], strict=True):
            put[key].append(np.ascontiguousarray(column))
        if named and (len(self._names) > NAMES_IN_KEYS or len(self._keys) > KEYS_NAMED
                      or len(self._keys) - known > max(MOSTLY_NEW * len(keys), MANY_NEW)):
            self._named_keys, self._keys = False, {}
        elif len(self._unnamed) >= NAMES_CODED_AT_ONCE:
            self._code_names()
        return dropped

    def _add_keys(self, keys: list[tuple], new: list[int], at: np.ndarray, args: list) -> None:
        """Give the keys at `new` (positions in `keys`, not seen before) their rows in the key table, first
        seen first, written into `at`; their names, when keys have them, coded in one batch."""
        names = self._names.codes([keys[i][4] for i in new]).tolist() if self._named_keys else repeat(-1)
        for i, name in zip(new, names, strict=False):  # (repeat: endless)
            at[i] = self._key_row(keys[i], args[i], name)
        self._key_table = np.array(self._key_codes, np.int32).reshape(-1, 5)

    def _key_row(self, key: tuple, args: Args | None, name: int) -> int:
        """The row in the key table of one event key (category, process, thread, args key[, name]), added if
        new with its codes: category, process, thread, args (new values added to their tables), name."""
        row = self._keys.get(key)
        if row is None:
            cat, pid, tid, arg_key = key[:4]
            cats, pids, tids, threads, arg_codes = self._tables
            if arg_key not in arg_codes:
                arg_codes[arg_key] = len(self._arg_sets)
                self._arg_sets.append(self._share_args(args))
            p = _code(pids, pid)
            row = self._keys[key] = len(self._key_codes)
            thread = _code(threads, (p, _code(tids, tid)))
            self._key_codes.append((_code(cats, CATEGORY_ALIASES.get(cat, cat)), p, thread, arg_codes[arg_key], name))
        return row

    def _code_names(self) -> None:
        """Code the names of the last rows, in first-seen order: many pieces' at once, so that coding a
        trace of unique names costs a few array operations per ~16k names, not per piece."""
        if self._unnamed:
            self._chunks["name"].values()[-len(self._unnamed):] = self._names.codes(self._unnamed)
            self._unnamed = []

    @property
    def arg_codes(self) -> dict:
        """Each distinct set of args' key (its JSON, as decoded; repr for args made by hand) -> its code in
        the args column."""
        return self._tables[4]

    def part(self) -> Part:
        """The batches so far, to be taken into another builder."""
        self._code_names()
        cats, pids, tids, threads, arg_codes = self._tables
        return Part(self._joined(), (list(cats), list(pids), list(tids), list(threads),
                                     [k for k, v in arg_codes.items() if v >= 0]), self._names.part(), self._arg_sets)

    def reserve(self, rows: int) -> None:
        """Make room for `rows` rows in all, so that absorbing parts never grows a column."""
        for column in self._chunks.values():
            column.reserve(rows)

    def reserve_for_bytes(self, size: int) -> None:
        """Make room for the events of `size` bytes of JSON, so that the columns are not grown (copied,
        their new pages faulted in) as they fill: a row for each MIN_EVENT_BYTES, more than a trace has
        (rows never written cost address space, not memory); a trace of shorter events grows as before."""
        self.reserve(size // MIN_EVENT_BYTES)

    def absorb(self, tables: tuple[list, ...], names: tuple, arg_sets: list[Args],
               lengths: list[tuple[str, int, str]], fill: Callable[[str, np.ndarray], None]) -> None:
        """Append another builder's part (its `Part.tables`, `names` and `arg_sets`; `lengths`: each column's
        name, rows and type), each column's rows written in place by `fill(column, rows)`, then its codes
        turned into this builder's (new values added in order): after every column is filled, so that the
        process sending them may end before its names are merged (the two are not held at once)."""
        self._code_names()
        filled = [(key, self._filled(key, n, dtype, fill)) for key, n, dtype in lengths]
        cats, pids, tids, threads, arg_codes = self._tables
        their_cats, their_pids, their_tids, their_threads, their_args = tables
        pid = [_code(pids, v) for v in their_pids]
        tid = [_code(tids, v) for v in their_tids]
        args = []
        for key, a in zip(their_args, arg_sets, strict=True):
            if key not in arg_codes:
                arg_codes[key] = len(self._arg_sets)
                self._arg_sets.append(a)
            args.append(arg_codes[key])
        recode = {"cat": [_code(cats, v) for v in their_cats], "name": self._names.absorb(names),
                  "pid": pid, "thread": [_code(threads, (pid[p], tid[t])) for p, t in their_threads],
                  "args": [*args, -1]}  # code -1 (no args) stays -1: the last entry
        for key, rows in filled:
            if key in recode:  # a slice at a time: the copy a gather makes stays small
                table = np.array(recode[key], np.int32)
                for at in range(0, len(rows), RECODED_AT_ONCE):
                    rows[at:at + RECODED_AT_ONCE] = table[rows[at:at + RECODED_AT_ONCE]]

    def _filled(self, key: str, n: int, dtype: str, fill: Callable[[str, np.ndarray], None]) -> np.ndarray:
        """`n` more rows of column `key`, written by `fill` as `dtype` (the column widened first if that is
        wider: a correlation id past int32)."""
        column = self._chunks[key]
        column.widen(dtype)
        rows = column.extend(n)
        if rows.dtype == dtype:
            fill(key, rows)
        else:  # ours wider
            theirs = np.empty(n, dtype)
            fill(key, theirs)
            rows[:] = theirs
        return rows

    def _joined(self) -> dict[str, np.ndarray]:
        return {key: column.values() for key, column in self._chunks.items()}

    def columns(self) -> Columns:
        """The columns."""
        self._code_names()
        got = self._joined()
        cats, pids, tids, threads, _ = (list(t) for t in self._tables)
        order = sorted(range(len(threads)), key=threads.__getitem__)  # by process code, then thread code
        recode = np.zeros(len(threads), np.int32)
        recode[order] = np.arange(len(threads), dtype=np.int32)
        got["thread"] = recode[got["thread"]]
        self._names.freeze()
        return Columns(**got, cats=cats, names=self._names, pids=pids, arg_sets=self._arg_sets,
                       threads=[(pids[threads[i][0]], tids[threads[i][1]]) for i in order])


NAMES_IN_KEYS = 1 << 12  # up to this many names, keys have them (a dict lookup an event, not two)
KEYS_NAMED = 1 << 15  # up to this many keys with names (say, few names on many threads)
# a batch with more distinct new keys than this share of its events, and than MANY_NEW: names of their own, likely
MOSTLY_NEW, MANY_NEW = 0.5, 512
_KEY_COLUMNS = ("cat", "pid", "thread", "args", "name")  # the key table's columns
NAMES_CODED_AT_ONCE = 1 << 12  # ~1 MB of str held (long kernel names), for a few array operations per batch
RECODED_AT_ONCE = 1 << 18  # rows of another range's codes turned into ours per step (1 MB of int32)
MIN_EVENT_BYTES = 96  # a torch.profiler complete event is longer: `{"ph": "X", "cat": "cpu_op", "name": ...`
_COLUMNS = {"ts": np.float64, "dur": np.float64, "cat": np.int32, "name": np.int32, "pid": np.int32,
            "thread": np.int32, "corr": np.int32, "args": np.int32}  # corr: int64 once an id needs it
EVENT_FIELDS = ("name", "cat", "ts", "dur", "pid", "tid", "args")  # the reader's structs have them in this order
_FIELDS, _ASTUPLE = attrgetter(*EVENT_FIELDS), msgspec.structs.astuple
_NONE_IS_MINUS_ONE = {None: -1}  # .get(c, c): -1 for None, else c, in C
_ENCODE = msgspec.json.Encoder().encode


def _fields(events: list, decoded: bool) -> list[tuple]:
    """The events' fields as columns (EVENT_FIELDS): a decoded struct's read at once (`astuple`: its slots,
    the reader's struct declaring them in that order) and the rows transposed by `zip`, not one attribute
    lookup a field and event (an attribute of a struct is found through its type, as any object's: the
    seven lookups cost more than the tuple and its transposition)."""
    if not events:
        return [()] * len(EVENT_FIELDS)
    return list(zip(*map(_ASTUPLE if decoded else _FIELDS, events), strict=True))


@contextmanager
def _no_collections() -> Iterator[None]:
    """The cyclic garbage collector held off: a batch makes a few tuples an event (its fields, its keys), and
    every ~700 of them alive would set it off to walk them, though they hold no cycles (the decoded structs
    are not tracked); it runs again as usual once they are dropped."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _correlations(args: list) -> tuple[np.ndarray, bool]:
    """(the correlation column of `args`, int64, -1 for none; whether one was None): one pass where none is
    None (the reader's args default to -1), else a second one."""
    try:
        return np.fromiter(map(getattr, args, repeat("correlation"), repeat(-1)), np.int64, len(args)), False
    except TypeError:  # a correlation of None: written `null`, or args made by hand
        corr = list(map(getattr, args, repeat("correlation"), repeat(None)))
        return np.fromiter(map(_NONE_IS_MINUS_ONE.get, corr, corr), np.int64, len(corr)), True


def _without_correlation(args: list, own: bool, corr: np.ndarray, some_null: bool) -> tuple[list, list]:
    """(the args without their correlation, each one's key: what events share, coded once): in place
    when they are `own`, fresh from the decoder (the correlation set to its default, -1, which the key,
    their JSON, leaves out; raw lists stay raw bytes); else copies with None there, keyed by repr (NaN is
    not None there). `corr`: their correlation column (`some_null`: a None in it read as -1)."""
    if not own:
        args = [a and msgspec.structs.replace(a, correlation=None) for a in args]
        return args, list(map(repr, args))
    # only the args with an id are reset (most have none: a cpu_op's), unless a null, read as -1, hides one
    with_id = filter(None, args) if some_null else compress(args, (corr != -1).tolist())
    deque(map(setattr, with_id, repeat("correlation"), repeat(-1)), maxlen=0)
    return args, list(map(_ENCODE, args))


def _code(table: dict, value: object) -> int:
    return table.setdefault(value, len(table))


def columns_of(events: list) -> Columns:
    """Columns of events made some other way than by the reader (tests, slices of an analysis)."""
    builder = ColumnBuilder()
    builder.add(events)
    return builder.columns()
