"""The distinct event names of a trace, each kept once and compactly: one UTF-8 blob with the end of
each name, found again by hash in an open-addressing table of codes that NumPy probes a batch at a time
(trace/hash_slots.py), so that a trace whose events all have names of their own (every kernel's shape in
its name, say) costs ~1.1 bytes a character plus ~30 a name, not the ~170 of a Python string in a dict, and
coding a batch of new names is a few array operations, not a Python call per name. Reads as a sequence of
str (`names[code]`); a name asked for more than once is kept, so that later asks share one str. Imports no
torch.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Sequence
from itertools import repeat

import numpy as np

from attnprof.trace.hash_slots import HashSlots
from attnprof.trace.utf8_runs import runs_of, same_as_coded, utf8

FEW = 8192  # up to this many names a dict finds them (faster); beyond, the hash table (smaller)
# names `starting_with` tests at once: its arrays of 8 bytes a name stay under 1 MB (a trace of unique names has
# 100k+ names, whose arrays at once were the analysis's largest passing peak, ~7 MB on unique64)
_TESTED_AT_ONCE = 1 << 15


class Names(Sequence):
    """Names coded in first-seen order; `codes(batch)` codes a batch of names at once, adding new ones."""

    def __init__(self) -> None:
        self._blob = bytearray()
        self._ends = array("q")
        self._few: dict[str, int] | None = {}  # every name, while there are at most FEW (then: the table)
        # the str of each code while there are few; once many, those asked for more than once (`_kept`; `_asked`:
        # a byte per code, made at the first ask, not while reading), so that a name asked for again and again is
        # one object that the analysis, its caches and its result share (not a list slot per name: 8 bytes each)
        self._made: list[str] = []
        self._kept: dict[int, str] = {}
        self._asked = bytearray()
        self._hashes: array | None = array("q")  # the hash of each code (None: frozen)
        self._table = HashSlots()  # the codes by hash, once names are many
        self._clashes: dict[str, int] = {}  # names whose hash an earlier, other name has (never, in practice)

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, code: int | slice) -> str | list[str]:  # type: ignore[override]
        if isinstance(code, slice):
            return [self[i] for i in range(*code.indices(len(self)))]
        if self._few is not None:
            return self._made[code]
        n = len(self._ends)
        if not -n <= code < n:
            raise IndexError(f"name code {code} out of range")
        code %= n
        made = self._kept.get(code)
        if made is None:
            # kept from its second ask on: a name asked for once (most of the ops') is not held, one asked
            # for again (a kernel's, by every rule) is shared
            made = self._decoded(code)
            if len(self._asked) < n:
                self._asked.extend(bytes(n - len(self._asked)))
            if self._asked[code]:
                self._kept[code] = made
            self._asked[code] = 1
        return made

    def _decoded(self, code: int) -> str:
        return self._blob[self._ends[code - 1] if code else 0: self._ends[code]].decode("utf-8", "surrogatepass")

    def __iter__(self) -> Iterator[str]:
        """Every name (those not made yet are not kept: a trace of unique names has 100k+)."""
        return iter(self._made) if self._few is not None else self._each()

    def _each(self) -> Iterator[str]:
        text, start = self._blob.decode("utf-8", "surrogatepass"), 0
        if len(text) == len(self._blob):  # ASCII: character offsets are byte offsets
            for end in self._ends:
                yield text[start:end]
                start = end
        else:
            yield from (self._decoded(i) for i in range(len(self)))

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
        for code in self._table.candidates(hash(name)):
            made = self._kept.get(code)
            if (made if made is not None else self._decoded(code)) == name:
                return code
        return -1

    def starting_with(self, prefix: str) -> np.ndarray:
        """Per code: whether its name starts with `prefix` (bool), as `str.startswith` says, tested on the
        blob's bytes a byte of the prefix at a time (UTF-8 is written a character at a time, so a name
        starts with a string exactly when its bytes start with the string's): no str made per name."""
        out = np.zeros(len(self), np.bool_)
        ends = np.frombuffer(self._ends, np.int64)
        want = prefix.encode("utf-8", "surrogatepass")
        blob = np.frombuffer(self._blob, np.uint8)
        for lo in range(0, len(self), _TESTED_AT_ONCE):
            stop = ends[lo:lo + _TESTED_AT_ONCE]
            starts = np.concatenate([ends[lo - 1:lo] if lo else np.zeros(1, np.int64), stop[:-1]])
            at = np.flatnonzero(stop - starts >= len(want))
            for i, byte in enumerate(want):
                at = at[blob[starts[at] + i] == byte]
            out[lo + at] = True
        return out

    def among(self, names: Sequence[str]) -> np.ndarray:
        """Per code: whether its name is one of `names` (bool), each found by its hash: no str per code."""
        out = np.zeros(len(self), np.bool_)
        out[[code for code in map(self.find, names) if code >= 0]] = True
        return out

    def joined(self, codes: Sequence[int] | np.ndarray, sep: bytes = b"\0") -> tuple[bytes, np.ndarray]:
        """The UTF-8 bytes of the names at `codes`, in that order, each followed by `sep`, and where each name's
        bytes end in them (int64, the separator after it not counted): one blob that a search for text of
        several names at once can read (a `sep` no such text holds keeps a match within one name)."""
        codes = np.asarray(codes, np.int64)
        ends = np.frombuffer(self._ends, np.int64)
        stop = ends[codes] if len(codes) else np.zeros(0, np.int64)
        start = np.where(codes > 0, ends[codes - 1], 0) if len(codes) else stop
        blob = memoryview(self._blob)
        data = sep.join([*map(blob.__getitem__, map(slice, start.tolist(), stop.tolist())), b""])
        return data, np.cumsum(stop - start + len(sep)) - len(sep)

    def freeze(self) -> None:
        """Drop what only coding more names needs (8 bytes a name), made again if more come."""
        self._hashes = None

    def codes(self, batch: list[str]) -> np.ndarray:
        """The codes of `batch`'s names (int32), the new ones added in the order they first come."""
        if self._few is not None:
            return self._few_codes(batch)
        self._thaw()
        hashes = np.fromiter(map(hash, batch), np.int64, len(batch))

        def same(hit: np.ndarray, codes: np.ndarray) -> np.ndarray:
            return same_as_coded(self._blob, self._ends, *utf8(list(map(batch.__getitem__, hit.tolist()))), codes)
        out, taken = self._found(hashes, same, batch.__getitem__)
        missing = np.flatnonzero(out < 0)
        if len(missing):  # (all of them, in a trace of unique names: the batch itself, not a copy)
            names = batch if len(missing) == len(batch) else list(map(batch.__getitem__, missing.tolist()))
            self._add(names, missing, out, hashes[missing], taken[missing])
        return out

    def _found(self, hashes: np.ndarray, same: Callable[[np.ndarray, np.ndarray], np.ndarray],
               name_at: Callable[[int], str]) -> tuple[np.ndarray, np.ndarray]:
        """(the code of each name of these `hashes` already coded, -1 where none; whether a coded name has its
        hash): found by hash in the table, each hit checked by `same(positions, codes)` (the names at those
        positions are the ones so coded), a name whose hash an earlier, other name has by `name_at` in the
        clashes. For `codes` (a batch of str) and `absorb` (another table's bytes) alike."""
        out = self._table.lookup(hashes, np.frombuffer(self._hashes, np.int64))
        taken = out >= 0  # whose hash a coded name has: a new name among them is a clash
        hit = np.flatnonzero(taken)
        if len(hit):  # a hash matched: the name must too (else it is a clash, or new)
            out[hit[~same(hit, out[hit])]] = -1
        missing = np.flatnonzero(out < 0)
        if len(missing) and self._clashes:
            out[missing] = [self._clashes.get(name_at(i), -1) for i in missing.tolist()]
        return out, taken

    def _few_codes(self, batch: list[str]) -> np.ndarray:
        few = self._few
        out = np.fromiter(map(few.get, batch, repeat(-1)), np.int32, len(batch))
        missing = np.flatnonzero(out < 0).tolist()  # names not coded yet (few, after the first batches)
        if missing:
            new = list(dict.fromkeys(map(batch.__getitem__, missing)))
            few.update(zip(new, range(len(self), len(self) + len(new)), strict=True))
            self._append(new)
            self._made.extend(new)
            out[missing] = np.fromiter(map(few.__getitem__, map(batch.__getitem__, missing)), np.int32, len(missing))
        if len(few) > FEW:  # from now on the compact way
            self._to_table()
        return out

    def _to_table(self) -> None:
        """Leave the dict of few names: every name so far in the hash table, made from now on when asked."""
        few, self._few = self._few, None
        self._made, self._hashes = [], array("q")  # (no hash kept while few; frozen: None)
        hashes = np.fromiter(map(hash, few), np.int64, len(few))
        self._register(list(few).__getitem__, 0, hashes, _first_of_their_hash(hashes))

    def _thaw(self) -> None:
        """The hash of each code again, after `freeze`: more names after all."""
        if self._hashes is None:
            self._hashes = array("q", np.fromiter(map(hash, self._each()), np.int64, len(self)).tobytes())

    def part(self) -> tuple[memoryview, memoryview, memoryview | None]:
        """The names as `absorb` takes them in another process (forked from this one, so that it hashes a
        str alike): views of the blob, the ends and, once the names are many, their hashes (no copy: valid
        while no name is added)."""
        hashes = None if self._few is not None or self._hashes is None else memoryview(self._hashes).cast("B")
        return memoryview(self._blob), memoryview(self._ends).cast("B"), hashes

    def absorb(self, part: tuple) -> np.ndarray:
        """The codes here of the names of another table's `part` (distinct, coded in first-seen order), those
        new here added in that order: found by their hashes and compared as bytes, no str made, when many."""
        blob, ends, hashes = part
        ends = np.frombuffer(ends, np.int64)
        starts = np.concatenate([np.zeros(1, np.int64), ends[:-1]])
        if hashes is None:  # few: as str
            spans = zip(starts.tolist(), ends.tolist(), strict=True)
            return self.codes([str(blob[a:b], "utf-8", "surrogatepass") for a, b in spans])
        if self._few is not None:
            self._to_table()
        self._thaw()
        hashes, sizes, data = np.frombuffer(hashes, np.int64), ends - starts, np.frombuffer(blob, np.uint8)
        name_at = (lambda i: str(blob[starts[i]:ends[i]], "utf-8", "surrogatepass"))  # noqa: E731
        out, taken = self._found(hashes, lambda hit, codes: same_as_coded(self._blob, self._ends, data, sizes[hit],
                                                                          codes, starts[hit]), name_at)
        missing = np.flatnonzero(out < 0)
        if len(missing):
            kept = blob if len(missing) == len(hashes) else runs_of(blob, starts, ends, missing)
            first = len(self)
            out[missing] = np.arange(first, first + len(missing), dtype=np.int32)
            self._append_bytes(kept, sizes[missing])
            hashes = hashes[missing]
            self._register(lambda i: name_at(int(missing[i])), first, hashes,
                           _first_of_their_hash(hashes) & ~taken[missing])
        return out

    def _add(self, names: list[str], at: np.ndarray, out: np.ndarray, hashes: np.ndarray, taken: np.ndarray) -> None:
        """Code `names`, not coded yet, found at positions `at` of a batch (their `hashes`, and whether a
        coded name has each), writing their codes there in `out`; first seen first."""
        first = len(self)
        alone = _first_of_their_hash(hashes)  # one sort tells whether two of them share a hash
        if alone.all():  # no hash twice, so no name twice (a trace of unique names): no dict needed
            fresh = names
            out[at] = np.arange(first, first + len(names), dtype=np.int32)
        else:  # a name twice (or two names of one hash)
            first_at: dict[str, int] = {}
            list(map(first_at.setdefault, names, range(len(names))))  # each name's first place among them
            firsts = np.fromiter(first_at.values(), np.intp, len(first_at))
            fresh, hashes, taken = list(first_at), hashes[firsts], taken[firsts]
            code_of = dict(zip(fresh, range(first, first + len(fresh)), strict=True))
            out[at] = np.fromiter(map(code_of.__getitem__, names), np.int32, len(names))
            alone = _first_of_their_hash(hashes)
        self._append(fresh)
        self._register(fresh.__getitem__, first, hashes, alone & ~taken)

    def _append(self, names: list[str]) -> None:
        """Names not seen yet, coded from len(self) on, in this order."""
        self._append_bytes(*utf8(names))

    def _append_bytes(self, data: bytes | np.ndarray, sizes: np.ndarray) -> None:
        """Names not seen yet, as UTF-8 one after the other (`data`) and each one's size."""
        self._ends.frombytes((np.cumsum(sizes) + len(self._blob)).tobytes())
        self._blob += memoryview(data)  # (not `+= data`: NumPy would add an array elementwise)

    def _register(self, name_at: Callable[[int], str], first: int, hashes: np.ndarray, alone: np.ndarray) -> None:
        """Make the names coded `first` on (their `hashes`; the i-th is `name_at(i)`) findable: by the hash
        table those `alone` with their hash (no other name has it: in the table, or earlier among them), the
        others by name."""
        self._hashes.frombytes(hashes.tobytes())  # (an array, not NumPy's: it grows in place, by an eighth)
        clash = np.flatnonzero(~alone).tolist()
        self._clashes.update(zip(map(name_at, clash), (first + i for i in clash), strict=True))
        self._table.insert(np.flatnonzero(alone).astype(np.int32) + first, np.frombuffer(self._hashes, np.int64))


def _first_of_their_hash(hashes: np.ndarray) -> np.ndarray:
    """Per hash: whether no earlier one is equal (bool)."""
    first = np.zeros(len(hashes), np.bool_)
    first[np.unique(hashes, return_index=True)[1]] = True
    return first
