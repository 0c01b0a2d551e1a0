"""The analysis's memory policy, in one place: `lean()` around the work (the cyclic GC paused, numpy's huge
pages off) and `trim()` where a stage drops what it built (after each rule, after each section of the
analysis dict). The stages below (trace, analysis, findings) know nothing of it: the pipeline applies it.

Why each: the rules and sections make tens of thousands of short-lived objects and no reference cycles, so
the cyclic GC would walk them every 700 allocations for nothing (a tenth of their time on a whole-model
trace); arrays as long as the trace are written once, and on a virtual machine a huge page's first touch
costs far more than its 512 small pages' (trace.growing.small_pages); and glibc keeps what a program frees
for its own reuse while Python's small objects live in arenas of their own, so the arrays a stage drops stay
resident while what is built next grows elsewhere: without a trim the peak would be both. Imports no torch."""

from __future__ import annotations

import ctypes
import functools
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

from attnprof.trace.growing import small_pages

T = TypeVar("T")


@contextmanager
def lean() -> Iterator[None]:
    """The block runs with the cyclic GC paused (whatever it would have found, it finds afterwards) and
    with arrays on small pages."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        with small_pages():
            yield
    finally:
        if enabled:
            gc.enable()


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim, or None where the C library is another (musl, macOS, Windows)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError, TypeError):
        return None


def trim() -> None:
    """Hand the heap's free pages back (malloc_trim(0); ~0.1 ms to a few ms); nothing where glibc is absent."""
    release = _malloc_trim()
    if release is not None:
        release(0)


def handed_back(section: T) -> T:
    """`section`, once the freed heap is handed back: what each section drops passing is given back before
    the next makes its objects."""
    trim()
    return section
