"""The distinct event names of a trace, each kept once and compactly: one UTF-8 blob with the end of
each name, found again by hash with sorted searches, so that a trace whose events all have names of
their own (every kernel's shape in its name, say) costs ~1.1 bytes a character plus 20 a name, not the
~170 of a Python string in a dict. Reads as a sequence of str (`names[code]`). Imports no torch.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from itertools import repeat

import numpy as np

FEW = 8192  # up to this many names a dict finds them (faster); beyond, the hash runs (smaller)


class Names(Sequence):
    """Names coded in first-seen order; `codes(batch)` codes a batch of names at once, adding new ones."""

    def __init__(self) -> None:
        self._blob = bytearray()
        self._ends = array("q")
        self._runs: list[tuple[np.ndarray, np.ndarray]] = []  # (hashes, codes) sorted by hash, sizes halving
        self._clashes: dict[str, int] = {}  # names whose hash an earlier, other name has (never, in practice)
        self._few: dict[str, int] | None = {}  # every name, while there are at most FEW (then: the runs)
        self._few_list: list[str] | None = []  # the same str objects by code (a name asked for is no new str)

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, code: int | slice) -> str | list[str]:  # type: ignore[override]
        if self._few_list is not None:
            return self._few_list[code]
        if isinstance(code, slice):
            return [self[i] for i in range(*code.indices(len(self)))]
        if code < 0:
            code += len(self)
        if not 0 <= code < len(self):
            raise IndexError("name code out of range")
        return self._blob[self._ends[code - 1] if code else 0: self._ends[code]].decode("utf-8", "surrogatepass")

    def __iter__(self) -> Iterator[str]:
        text, start = self._blob.decode("utf-8", "surrogatepass"), 0
        if len(text) == len(self._blob):  # ASCII: character offsets are byte offsets
            for end in self._ends:
                yield text[start:end]
                start = end
        else:
            yield from (self[i] for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (Names, list, tuple)) and len(other) == len(self) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Names({list(self)!r})"

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.find(name) >= 0

    def index(self, name: object, start: int = 0, stop: int | None = None) -> int:
        code = self.find(name) if isinstance(name, str) else -1
        if code < 0 or code < start or (stop is not None and code >= stop):
            raise ValueError(f"{name!r} is not a name of the trace")
        return code

    def find(self, name: str) -> int:
        """The code of `name`, -1 when the trace has none."""
        if self._few is not None:
            return self._few.get(name, -1)
        if name in self._clashes:
            return self._clashes[name]
        h = hash(name)
        for hashes, codes in self._runs:
            at = int(np.searchsorted(hashes, h))
            if at < len(hashes) and hashes[at] == h and self[int(codes[at])] == name:
                return int(codes[at])
        return -1

    def codes(self, batch: list[str]) -> np.ndarray:
        """The codes of `batch`'s names (int32), the new ones added in the order they first come."""
        if self._few is not None:
            return self._few_codes(batch)
        hashes = np.fromiter(map(hash, batch), np.int64, len(batch))
        out = np.full(len(batch), -1, np.int32)
        in_runs = np.zeros(len(batch), np.bool_)  # whose hash a coded name has
        for run_hashes, run_codes in self._runs:
            at = np.minimum(np.searchsorted(run_hashes, hashes), len(run_hashes) - 1)
            same = run_hashes[at] == hashes
            in_runs |= same
            hit = np.flatnonzero(same & (out < 0))
            out[hit] = run_codes[at[hit]]
        for i in np.flatnonzero(out >= 0).tolist():  # a hash matched: the name must too
            if self[int(out[i])] != batch[i]:
                out[i] = -1
        new = np.flatnonzero(out < 0)
        if len(new):
            self._add(batch, new, out, hashes, in_runs)
        return out

    def _few_codes(self, batch: list[str]) -> np.ndarray:
        few = self._few
        out = np.fromiter(map(few.get, batch, repeat(-1)), np.int32, len(batch))
        missing = np.flatnonzero(out < 0).tolist()  # names not coded yet (few, after the first batches)
        if missing:
            new = list(dict.fromkeys(map(batch.__getitem__, missing)))
            few.update(zip(new, range(len(self), len(self) + len(new)), strict=True))
            self._few_list.extend(new)
            self._append(new)
            out[missing] = np.fromiter(map(few.__getitem__, map(batch.__getitem__, missing)), np.int32, len(missing))
        if len(few) > FEW:  # from now on the compact way: every name so far in one hash run
            self._few = self._few_list = None
            self._register(np.arange(len(self), dtype=np.int32))
        return out

    def _append(self, names: list[str]) -> None:
        """Names not seen yet, coded from len(self) on, in this order."""
        encoded = list(map(str.encode, names, repeat("utf-8"), repeat("surrogatepass")))
        ends = np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded))) + len(self._blob)
        self._blob += b"".join(encoded)
        self._ends.frombytes(ends.tobytes())

    def _add(self, batch: list[str], new: np.ndarray, out: np.ndarray, hashes: np.ndarray,
             in_runs: np.ndarray) -> None:
        """Code the names of `batch` at positions `new` (first seen first), writing their codes into `out`
        (`hashes` of the batch, and whether a coded name has each: `codes` searched the runs already)."""
        names = list(map(batch.__getitem__, new.tolist()))
        clashes, first = self._clashes, len(self)
        first_at: dict[str, int] = {}
        list(map(first_at.setdefault, names, new.tolist()))  # each name's first place in the batch
        fresh = [name for name in first_at if name not in clashes]
        code_of = dict(zip(fresh, range(first, first + len(fresh)), strict=True))
        if clashes:
            code_of.update((name, clashes[name]) for name in names if name in clashes)
        out[new] = np.fromiter(map(code_of.__getitem__, names), np.int32, len(names))
        self._append(fresh)
        at = np.fromiter(map(first_at.__getitem__, fresh), np.intp, len(fresh))
        self._register(np.arange(first, first + len(fresh), dtype=np.int32), fresh, hashes[at], in_runs[at])

    def _register(self, added: np.ndarray, names: list[str] | None = None, hashes: np.ndarray | None = None,
                  in_runs: np.ndarray | None = None) -> None:
        """Make the names of codes `added` findable by hash (by name, those whose hash another has);
        `hashes` and `in_runs` (whether a coded name has each hash), when known."""
        names = list(map(self.__getitem__, added.tolist())) if names is None else names
        hashes = np.fromiter(map(hash, names), np.int64, len(added)) if hashes is None else hashes
        clash = _repeated(hashes)
        if in_runs is not None:
            clash |= in_runs
        else:
            for run_hashes, _ in self._runs:
                at = np.minimum(np.searchsorted(run_hashes, hashes), len(run_hashes) - 1)
                clash |= run_hashes[at] == hashes
        if clash.any():  # a hash two names share: those names are looked up by name
            self._clashes.update(zip(map(self.__getitem__, added[clash].tolist()), added[clash].tolist(), strict=True))
            added, hashes = added[~clash], hashes[~clash]
        if len(added):
            self._push(hashes, added)

    def _push(self, hashes: np.ndarray, codes: np.ndarray) -> None:
        """Add a sorted run, merging runs of like size (so there are ~log2(names) of them)."""
        order = np.argsort(hashes, kind="stable")
        run = (hashes[order], codes[order])
        while self._runs and len(self._runs[-1][0]) <= len(run[0]):
            last = self._runs.pop()
            hashes, codes = np.concatenate([last[0], run[0]]), np.concatenate([last[1], run[1]])
            order = np.argsort(hashes, kind="stable")
            run = (hashes[order], codes[order])
        self._runs.append(run)


def _repeated(values: np.ndarray) -> np.ndarray:
    """Whether each value occurs more than once."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    return counts[inverse.reshape(-1)] > 1
