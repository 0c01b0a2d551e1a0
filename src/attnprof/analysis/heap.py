"""Giving freed heap back to the operating system. glibc keeps what a program frees for its own reuse,
but Python's small objects live in arenas of their own, so the big arrays an analysis drops (the op
trees, once the rules that walk them ran) stay resident while what is built next grows elsewhere: the peak
would be both. Imports no torch."""

from __future__ import annotations

import ctypes
import functools


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim, or None where the C library is another (musl, macOS, Windows)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError, TypeError):
        return None


def return_freed_heap() -> None:
    """Hand the heap's free pages back (malloc_trim(0); a few ms); nothing where glibc is absent."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
