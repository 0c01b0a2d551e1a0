"""An open-addressing table of codes by hash, probed a batch at a time by NumPy (trace/names.py finds names
again by it): each code sits at its hash's slot or after it, the table kept at least half empty, so that a
batch of lookups or insertions is a few array operations per probe step, not a Python call per code.
Imports no torch.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

EMPTY = -1  # a free slot


class HashSlots:
    """Codes (int32) by their hashes; the hash of each code is `known[code]`, kept by the caller."""

    def __init__(self) -> None:
        self._slots = np.zeros(0, np.int32)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def candidates(self, h: int) -> Iterator[int]:
        """The codes at `h`'s slot and after it, up to a free slot: those the code of hash `h` is among."""
        if self._count:
            mask = len(self._slots) - 1
            slot = h & mask
            while (code := int(self._slots[slot])) != EMPTY:  # a few slots: the table is at least half empty
                yield code
                slot = (slot + 1) & mask

    def lookup(self, hashes: np.ndarray, known: np.ndarray) -> np.ndarray:
        """The code in the table with each hash (int32), -1 where none has it."""
        out = np.full(len(hashes), -1, np.int32)
        if not self._count:
            return out
        mask = len(self._slots) - 1
        todo = np.arange(len(hashes))
        slot = hashes & mask
        while len(todo):
            code = self._slots[slot]
            filled = code != EMPTY
            match = filled & (known[code] == hashes[todo])  # (an empty slot's -1 reads a hash unused)
            out[todo[match]] = code[match]
            more = filled & ~match  # a slot taken by another hash: probe the next
            todo, slot = todo[more], (slot[more] + 1) & mask
        return out

    def insert(self, codes: np.ndarray, known: np.ndarray) -> None:
        """Put `codes` in the table (their hashes distinct and not in it), growing it to stay half empty."""
        if 2 * (self._count + len(codes)) > len(self._slots):
            size = 1 << max(12, int(2 * (self._count + len(codes))).bit_length())
            codes = np.concatenate([self._slots[self._slots != EMPTY], codes])
            self._slots, self._count = np.full(size, EMPTY, np.int32), 0
        mask = len(self._slots) - 1
        slot = known[codes] & mask
        todo = codes
        while len(todo):
            free = self._slots[slot] == EMPTY
            self._slots[slot[free]] = todo[free]  # of codes sent to one free slot, one wins
            placed = free & (self._slots[slot] == todo)
            todo, slot = todo[~placed], (slot[~placed] + 1) & mask
        self._count += len(codes)
