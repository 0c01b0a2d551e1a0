"""A kernel's launch geometry where its producer wrote it on the launch: ROCm 6's roctracer puts `grid` and
`block` on the `hipLaunchKernel` event, not on the kernel (MI250, MI210 traces), where CUDA's CUPTI and later
ROCm put them on the kernel. The kernel is given its launch's, so every rule reads a kernel's geometry in one
place; a kernel that has its own keeps it. Imports no torch.
"""

from __future__ import annotations

import msgspec
import numpy as np

from attnprof.trace.columns import Columns
from attnprof.trace.events import LAUNCH_CATEGORIES, Args


def carry_launch_geometry(cols: Columns) -> int:
    """Give each kernel without a grid the grid and block of its launch (same correlation id, carried by one
    launch only: ids several processes share are left alone), in place; return how many kernels got them."""
    sets, n = cols.arg_sets, len(cols.arg_sets)
    has_grid = np.array([a is not None and a.grid is not None for a in sets] + [False])  # code -1 (no args): last
    kernel = cols.code("cats", "kernel")
    launch_cats = [code for code in (cols.code("cats", c) for c in LAUNCH_CATEGORIES) if code >= 0]
    if kernel < 0 or not launch_cats or not has_grid.any():
        return 0
    kernels = np.flatnonzero((cols.cat == kernel) & ~has_grid[cols.args] & (cols.corr != -1))
    launches = np.flatnonzero(np.isin(cols.cat, launch_cats) & has_grid[cols.args] & (cols.corr != -1))
    if not len(kernels) or not len(launches):
        return 0
    ids, first, counts = np.unique(cols.corr[launches], return_index=True, return_counts=True)
    at = np.minimum(np.searchsorted(ids, cols.corr[kernels]), len(ids) - 1)
    hit = (ids[at] == cols.corr[kernels]) & (counts[at] == 1)
    kernels, source = kernels[hit], launches[first[at[hit]]]
    own = np.where(cols.args[kernels] < 0, n, cols.args[kernels]).astype(np.int64)
    pairs, inverse = np.unique(own * (n + 1) + cols.args[source], return_inverse=True)
    codes = []
    for pair in pairs.tolist():
        mine, theirs = divmod(pair, n + 1)
        base = sets[mine] if mine < n and sets[mine] is not None else Args()
        codes.append(len(sets))
        sets.append(msgspec.structs.replace(base, grid=sets[theirs].grid, block=sets[theirs].block))
    cols.args[kernels] = np.asarray(codes, cols.args.dtype)[inverse]
    return len(kernels)
