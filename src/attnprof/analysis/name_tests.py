"""Which of a trace's names pass a test, each distinct name tested once per analysis: a trace whose names are
all unique has 100k+, so a prefix test (`starting`) runs on the names' bytes and a set test (`Among`) looks each
name up, with no str made per name."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from attnprof.trace.names import Names
from attnprof.trace.reader import Trace
from attnprof.trace.utf8_runs import holding


class Analysed(Protocol):
    """What a name test needs of an analysis (attribution.Analysis): its trace and its caches."""

    trace: Trace
    caches: dict


def name_tests(a: Analysed, test: Callable[[str], bool]) -> np.ndarray:
    """Per name of the trace (by code): whether it passes `test`, each name tested once per analysis and
    test (a trace whose names are all unique has 100k+; `starting` gives one test per prefix)."""
    tables = a.caches.setdefault("name tests", {})
    if test not in tables:
        names = a.trace.columns.names
        if isinstance(test, Starting) and isinstance(names, Names):  # on the names' bytes, no str per name
            tables[test] = names.starting_with(test.prefix)
        elif isinstance(test, Among) and isinstance(names, Names):  # each looked up: no str per name
            tables[test] = names.among(test.names)
        else:
            tables[test] = np.fromiter(map(test, names), np.bool_, len(names))
    return tables[test]


def passing(a: Analysed, test: Callable[[str], bool], codes: np.ndarray) -> np.ndarray:
    """Per name code of `codes`: whether its name passes `test` (`name_tests`' table, gathered); an `Among` test of
    a trace's `Names` compares the codes with its names' few codes, no table of every name made for it (a trace
    whose names are all unique has 100k+: a byte each per test)."""
    if not (isinstance(test, Among) and isinstance(a.trace.columns.names, Names)):
        return name_tests(a, test)[codes]
    found = a.caches.setdefault("names found", {})
    if test not in found:
        found[test] = [code for code in map(a.trace.columns.names.find, test.names) if code >= 0]
    out = np.zeros(len(codes), np.bool_)
    for code in found[test]:
        out |= codes == code
    return out


@dataclass(frozen=True)
class Starting:
    """The test "the name starts with `prefix`" (`name_tests` runs it on a trace's names at once)."""

    prefix: str

    def __call__(self, name: str) -> bool:
        return name.startswith(self.prefix)


@dataclass(frozen=True)
class Among:
    """The test "the name is one of `names`" (`name_tests` looks each up in a trace's names)."""

    names: tuple[str, ...]

    def __call__(self, name: str) -> bool:
        return name in self.names


@functools.cache
def starting(prefix: str) -> Callable[[str], bool]:
    """The test "the name starts with `prefix`", one object per prefix (`name_tests` keeps its answers)."""
    return Starting(prefix)


BLOB = 2048  # names searched at once: the blob of them and its lowered copy stay a few MB


def may_hold(names: Names, codes: np.ndarray, parts: tuple[str, ...]) -> np.ndarray:
    """Per code of `codes`: whether its name, lowered, may hold one of `parts` (lower-case ASCII): True for each
    that does, found in BLOB names' bytes at a time lowered (`Names.joined`), no str per name; True too for a
    name with a byte past ASCII (`str.lower` lowers more than `bytes.lower`). A prefilter: the few names it
    keeps are then tested as str."""
    out = np.zeros(len(codes), np.bool_)
    wanted = [part.encode() for part in parts]
    for lo in range(0, len(codes), BLOB):
        data, ends = names.joined(codes[lo:lo + BLOB])
        low, stops = data.lower(), ends.tolist()
        for part in wanted:
            out[lo + np.array(holding(low, part, stops), np.int64)] = True
        if not data.isascii():
            out[lo + np.searchsorted(ends, np.flatnonzero(np.frombuffer(data, np.uint8) >= 0x80), side="right")] = True
    return out


def made_afresh(names: Sequence[str], codes: list[int]) -> Iterator[str]:
    """The names at `codes`, in order, for a pass that reads each once: made from the names' bytes (BLOB at a
    time) where they are a trace's `Names`, so that none is kept (`Names` keeps a name from its second ask on:
    a second rule's pass over a trace of unique names' thousands of GEMMs would keep each)."""
    if not isinstance(names, Names):
        yield from map(names.__getitem__, codes)
        return
    for lo in range(0, len(codes), BLOB):
        data, ends = names.joined(codes[lo:lo + BLOB])
        stops = ends.tolist()
        for start, stop in zip([0, *(e + 1 for e in stops[:-1])], stops, strict=True):
            yield data[start:stop].decode("utf-8", "surrogatepass")
