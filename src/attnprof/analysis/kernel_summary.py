"""The kernel table of `attnprof.analysis/1`: each distinct GPU activity launched inside the regions (by name
and kind), by total time, bounded as a profiler's summary is. Imports no torch.

A trace names a kernel per kind of work, so its table has tens to hundreds of rows (a recorded 12-layer Llama
forward: 34); one that names every launch apart (a shape or a counter in each name) has a row per launch, tens
of thousands, most of the result and of its memory. The table lists the KERNELS_LISTED costliest rows and sums
up the rest (`kernels_not_listed`), so the times still add up; the rows left out are never made.
"""

from __future__ import annotations

import numpy as np

from attnprof.analysis.activities import KINDS, NamedGroups, named_groups
from attnprof.analysis.attribution import Analysis, all_gpu

# Every row of any trace that names kernels by kind (hundreds at most in a training step of a large model),
# while a trace of a name per launch is cut to a table a person reads (the views show the first 25).
KERNELS_LISTED = 500


def kernel_table(a: Analysis) -> list[dict]:
    """The table's rows, the costliest first (ties: first launched first): at most KERNELS_LISTED."""
    gpu, (groups, listed) = all_gpu(a), _listed(a)
    n, kinds = max(len(a.forwards), 1), len(KINDS)
    rows = []
    for g in listed:
        lo, hi = int(groups.bounds[g]), int(groups.bounds[g + 1])
        total, key = sum(gpu.dur[groups.positions[lo:hi]].tolist()), int(groups.codes[g])  # left to right
        rows.append({"name": gpu.names[key // kinds], "kind": KINDS[key % kinds],
                     "per_forward": round((hi - lo) / n, 3), "avg_us": round(total / (hi - lo), 3),
                     "total_us": round(total, 3)})
    return rows


def kernels_not_listed(a: Analysis) -> dict | None:
    """The distinct GPU activities `kernel_table` leaves out, together: how many, how many launches of them a
    forward has and their total time; None when it lists every one."""
    groups, listed = _listed(a)
    if len(listed) == len(groups.codes):
        return None
    sizes = np.diff(groups.bounds)
    out = np.ones(len(sizes), np.bool_)
    out[listed] = False
    positions = groups.positions[np.repeat(out, sizes)]
    return {"distinct": int(np.count_nonzero(out)), "per_forward": round(len(positions) / max(len(a.forwards), 1), 3),
            "total_us": round(float(all_gpu(a).dur[positions].sum()), 3)}


def _listed(a: Analysis) -> tuple[NamedGroups, list[int]]:
    """The groups of GPU activities by (name, kind), first launched first, and which of them the table lists,
    in its order: by total time rounded as shown, ties in group order; made once per analysis."""
    if "kernel table" not in a.caches:
        gpu, kinds = all_gpu(a), len(KINDS)
        groups = named_groups(gpu.names, gpu.name.astype(np.int64) * kinds + gpu.kind, np.arange(len(gpu.name)))
        a.caches["kernel table"] = groups, costliest(gpu.dur[groups.positions], groups.bounds, KERNELS_LISTED)
    return a.caches["kernel table"]


def costliest(durs: np.ndarray, bounds: np.ndarray, listed: int, per: int = 1,
              among: np.ndarray | None = None) -> list[int]:
    """The `listed` groups (of `among`, else all) of the largest round(total / per, 3), a group's total the sum
    of `durs[bounds[g]:bounds[g + 1]]` left to right, costliest first, ties first group first. NumPy's sums
    (pairwise) may differ from those by an ulp or so: they only pick the groups within 0.002 of the last
    listed, whose sums are then made left to right and compared."""
    near = np.arange(len(bounds) - 1) if among is None else np.asarray(among, np.int64)
    if not len(durs) or not len(near):
        return []
    if len(near) > listed:
        approx = np.add.reduceat(durs, bounds[:-1])[near] / per
        last = np.partition(approx, len(approx) - listed)[len(approx) - listed]
        near = near[approx >= last - 0.002 - 1e-9 * abs(last)]
    lo, hi = bounds[near].tolist(), bounds[near + 1].tolist()
    totals = [round(sum(durs[i:j].tolist()) / per, 3) for i, j in zip(lo, hi, strict=True)]
    order = sorted(range(len(near)), key=lambda k: -totals[k])
    return near[order[:listed]].tolist()
