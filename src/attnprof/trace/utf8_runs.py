"""Names as UTF-8 one after the other (trace/names.py's blob, each name's end kept apart): a batch encoded,
compared with coded names, or some of them gathered, in a few array operations, not a Python call per
name. Imports no torch.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from itertools import repeat

import numpy as np

_COMPARED = 4096  # names compared per step (bounds the index arrays of `same_as_coded`)


def same_as_coded(blob: bytearray, ends: array, data: bytes | np.ndarray, sizes: np.ndarray, codes: np.ndarray,
                  starts: np.ndarray | None = None) -> np.ndarray:
    """Whether each name, as UTF-8 in `data` (its `sizes`, at `starts` there: one after the other when None),
    is the name of the code beside it in `blob` (names one after the other, each ending at `ends`), compared
    as bytes in a few array operations per `_COMPARED` names."""
    data = np.frombuffer(data, np.uint8)
    if starts is None:
        starts = np.cumsum(sizes) - sizes
    if len(codes) > _COMPARED:
        return np.concatenate([same_as_coded(blob, ends, data, sizes[i:i + _COMPARED], codes[i:i + _COMPARED],
                                             starts[i:i + _COMPARED]) for i in range(0, len(codes), _COMPARED)])
    stops = np.frombuffer(ends, np.int64)
    stored_at = np.where(codes > 0, stops[codes - 1], 0)
    same = stops[codes] - stored_at == sizes
    long = np.flatnonzero(same & (sizes > 0))
    if len(long):
        size = sizes[long]
        lo = np.cumsum(size) - size  # where each compared name starts among the bytes compared
        differ = gathered(np.frombuffer(blob, np.uint8), stored_at[long], size) != gathered(data, starts[long], size)
        same[long[np.add.reduceat(differ, lo) > 0]] = False
    return same


def runs_of(blob: bytes | memoryview, starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> bytes:
    """The bytes of the names at `at` (sorted) one after the other: one slice per run of consecutive ones
    (a few, where most names are new or most are known), not an index per byte."""
    cut = np.flatnonzero(np.diff(at) != 1) + 1  # where a run starts, after the first
    first, last = at[np.concatenate([[0], cut])], at[np.concatenate([cut - 1, [len(at) - 1]])]
    return b"".join(map(blob.__getitem__, map(slice, starts[first].tolist(), ends[last].tolist())))


def gathered(data: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The bytes of `data` at `starts` (each run `sizes` long), one run after the other (uint8)."""
    within = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    return data[np.repeat(starts, sizes) + within]


def utf8(names: list[str]) -> tuple[bytes, np.ndarray]:
    """The names as UTF-8 one after the other, and each one's size in bytes (one encode for all: UTF-8 is
    written a character at a time, lone surrogates too, so the whole's bytes are the parts' bytes)."""
    joined = "".join(names)
    data = joined.encode("utf-8", "surrogatepass")
    if len(data) == len(joined):  # ASCII: each name's bytes are its characters
        return data, np.fromiter(map(len, names), np.int64, len(names))
    sizes = np.fromiter(map(len, map(str.encode, names, repeat("utf-8"), repeat("surrogatepass"))), np.int64,
                        len(names))
    return data, sizes


def holding(data: bytes, part: bytes, ends: list[int]) -> list[int]:
    """The names (by place) of `data` that hold `part`, the names one after the other each followed by a byte
    `part` does not hold (`Names.joined`), a name ending at each of `ends`: a search from each hit on to the
    end of its name, so a name is found once however often it holds `part`."""
    found, at = [], data.find(part)
    while at >= 0:
        k = bisect_right(ends, at)
        found.append(k)
        at = data.find(part, ends[k])
    return found
