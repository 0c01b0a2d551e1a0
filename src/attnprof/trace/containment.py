"""Parents by interval containment on sorted arrays: the op nesting of `nesting._nest` (one stack walk
per thread) computed with NumPy, for the traces where it is clean (no partial overlap), which is nearly
all of them. Imports no torch.

In nesting order (by start, the longer first at equal starts), the stack walk makes an op's parent the
latest earlier op of its thread still on the stack whose end + EPS ("held") reaches the op's end. When
the walk is clean (nothing it pops is still open at the next start) that is simply the latest earlier
op of the thread whose held reaches the op's end: a "previous greater or equal" query, answered for all
ops at once by binary lifting over a table of range maxima. Whether the walk would be clean is checked
the same way (every op between an op and its parent is held less than the op's start); when it is not,
`parents` returns None and the caller walks the stack.
"""

from __future__ import annotations

import numpy as np


def parents(start: np.ndarray, end: np.ndarray, eps: float) -> np.ndarray | None:
    """For the ops of one thread in nesting order: the position of each one's parent (-1: a root), or
    None when the nesting has a partial overlap."""
    held = end + eps
    n = len(held)
    table = _range_maxima(held)
    pos = np.arange(n, dtype=np.int64) - 1
    for k in range(len(table) - 1, -1, -1):  # skip each block of 2^k earlier ops all held short of the end
        live = np.flatnonzero(pos >= 0)
        skip = table[k][pos[live]] < end[live]
        pos[live[skip]] -= 1 << k
    up = np.where(pos >= 0, pos, -1)
    between = np.arange(n) - up - 1  # ops strictly between each op and its parent (or the thread's start)
    has = np.flatnonzero(between > 0)
    if len(has):
        k = np.floor(np.log2(between[has])).astype(np.int64)
        first, last = up[has] + (1 << k), has - 1
        level = np.stack(table)  # [level, position]
        top = np.maximum(level[k, first], level[k, last])
        if np.any(top >= start[has]):
            return None
    return up


def _range_maxima(values: np.ndarray) -> list[np.ndarray]:
    """table[k][j] = max(values[max(j - 2^k + 1, 0) : j + 1])."""
    table = [values]
    width = 1
    while width < len(values):
        prev = table[-1]
        nxt = prev.copy()
        nxt[width:] = np.maximum(prev[width:], prev[:-width])
        table.append(nxt)
        width <<= 1
    return table
