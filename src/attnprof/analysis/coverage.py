"""How much of a trace's GPU work its analysis covers: each GPU activity is attributed to a region instance,
launched outside every one, or matches no launch event; the three add up to the trace's GPU activities (an
independent count reads the same). The largest left out are named, a bounded few, so a reader sees what the
per-region figures leave aside. Imports no torch.
"""

from __future__ import annotations

import numpy as np

from attnprof.analysis.activities import KIND_OF_CATEGORY
from attnprof.analysis.attribution import Analysis, all_gpu
from attnprof.trace.columns import Columns

NAMES_SHOWN = 5  # of the activities outside the region, and of those with no launch


def coverage(a: Analysis) -> dict:
    """The `unattributed` section: how many GPU activities the regions hold, how many were launched outside
    them, how many match no launch, their times, and the largest of those left out by name."""
    orphan_rows, outside_rows = a.left_out
    cols = a.trace.columns
    inside = all_gpu(a)
    inside_us = float(inside.dur.sum())
    outside_us, orphans_us = float(cols.dur[outside_rows].sum()), float(cols.dur[orphan_rows].sum())
    total_us = inside_us + outside_us + orphans_us
    return {"orphans": a.orphans, "outside_regions": a.outside,
            "attributed": len(inside.dur), "gpu_activities": len(inside.dur) + a.orphans + a.outside,
            "attributed_us": round(inside_us, 3), "outside_us": round(outside_us, 3),
            "orphans_us": round(orphans_us, 3),
            "region_share": round(inside_us / total_us, 4) if total_us > 0 else None,
            "largest_outside": largest(cols, outside_rows), "largest_orphans": largest(cols, orphan_rows)}


def largest(cols: Columns, rows: np.ndarray) -> list[dict]:
    """The NAMES_SHOWN GPU activities of `rows` with the most time together, by name and category."""
    if not len(rows):
        return []
    key = cols.name[rows].astype(np.int64) * len(cols.cats) + cols.cat[rows]
    keys, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    time = np.bincount(inverse, weights=cols.dur[rows], minlength=len(keys))
    top = np.argsort(-time, kind="stable")[:NAMES_SHOWN].tolist()
    return [{"name": cols.names[int(keys[i]) // len(cols.cats)],
             "kind": KIND_OF_CATEGORY.get(cols.cats[int(keys[i]) % len(cols.cats)], "kernel"),
             "count": int(counts[i]), "total_us": round(float(time[i]), 3)} for i in top]
