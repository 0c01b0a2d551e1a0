"""A column appended to in batches, and the allocation rule every array as long as a trace follows (small
pages). Imports no torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

try:
    from numpy._core.multiarray import _set_madvise_hugepage as _set_huge_pages
except ImportError:  # numpy 1
    from numpy.core.multiarray import _set_madvise_hugepage as _set_huge_pages


class Growing:
    """A column appended to in batches: an array twice as long as needed at most, its unused end never
    written (so never resident: big arrays are mapped pages), so that the column is never copied whole
    at the end, nor held twice."""

    def __init__(self, dtype: type):
        self._array = np.empty(0, dtype)
        self._n = 0

    def append(self, batch: np.ndarray) -> None:
        """`batch` appended; the column widened to its type first if a value of it does not fit (a
        correlation id past int32: the column is int32 while every id fits)."""
        if batch.dtype != self._array.dtype and len(batch):
            narrow = np.iinfo(self._array.dtype)
            if int(batch.min()) < narrow.min or int(batch.max()) > narrow.max:
                self.widen(batch.dtype)
        self.extend(len(batch))[:] = batch

    def widen(self, dtype: np.dtype) -> None:
        """The column as `dtype` from now on, when that is wider."""
        if np.dtype(dtype).itemsize > self._array.dtype.itemsize:
            self._move(len(self._array), dtype)

    def extend(self, n: int) -> np.ndarray:
        """`n` more rows, to be written through the view returned."""
        end = self._n + n
        if end > len(self._array):
            self.reserve(max(end, 2 * len(self._array), 4096))
        self._n = end
        return self._array[end - n:end]

    def reserve(self, rows: int) -> None:
        if rows > len(self._array):
            self._move(rows, self._array.dtype)

    def _move(self, rows: int, dtype: np.dtype) -> None:
        """The column in a new array of `rows` rows of `dtype`, its rows so far copied over."""
        with small_pages():
            moved = np.empty(rows, dtype)
        moved[:self._n] = self._array[:self._n]
        self._array = moved

    def values(self) -> np.ndarray:
        return self._array[:self._n]


@contextmanager
def small_pages() -> Iterator[None]:
    """Arrays allocated here are not advised to the kernel as huge pages (numpy does that for those of 4 MB
    and more): a column is written once, front to back, and on a virtual machine a huge page's first touch
    costs far more than its 512 small pages' (this 2-core VM: 0.5-0.6 s of CPU to fill 80 MB, 0.05 s
    without), which the range readers paid for every column they filled. The analysis's stages, whose
    arrays as long as the trace are written once too, use it as well (a decorator or a `with`)."""
    previous = _set_huge_pages(False)
    try:
        yield
    finally:
        _set_huge_pages(previous)
