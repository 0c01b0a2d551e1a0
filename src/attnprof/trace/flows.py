"""Launch-to-GPU flow events, for traces whose launches and kernels carry no `args.correlation`: Kineto links
each launch to its GPU work twice, by the correlation id in both events' args and by a flow (`ph` "s" on the
launch, "f" on the kernel, the same `id`, category `ac2g`; `async` in the 2021 schema). Some producers and
converters keep only the flows; the id is then read from them. A flow is bound to its event by process,
thread and start time (the flow's `ts` is the event's). Kept compactly (a few arrays a piece), and used only
when some launch or GPU activity has no correlation. Imports no torch.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from attnprof.trace.columns import Columns
from attnprof.trace.events import GPU_CATEGORIES, LAUNCH_CATEGORIES

FLOW_CATEGORIES = frozenset({"ac2g", "async"})
_ID_MAX = 2**31 - 1  # the correlation column is int32 unless an id needs more: flow ids past it are not used


class Flows:
    """The flows of a trace: per flow its start time, id, thread (a code into `threads`) and whether it
    starts (on the launch) or finishes (on the GPU activity)."""

    def __init__(self) -> None:
        self.threads: dict[tuple, int] = {}  # (pid, tid) -> code
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, flows: list, starts: bool) -> None:
        """Decoded flow structs (fields id, cat, pid, tid, ts) of one phase: starts ("s") or finishes ("f")."""
        kept = [f for f in flows if _usable(f)]
        if not kept:
            return
        code = self.threads.setdefault
        self.parts.append((np.fromiter((f.ts for f in kept), np.float64, len(kept)),
                           np.fromiter((f.id for f in kept), np.int64, len(kept)),
                           np.fromiter((code((f.pid, f.tid), len(self.threads)) for f in kept), np.int64, len(kept)),
                           np.full(len(kept), starts)))

    def merge(self, other: Flows) -> None:
        """Another reader's flows (a range read by another process), their threads recoded into ours."""
        recode = np.array([self.threads.setdefault(t, len(self.threads)) for t in other.threads] or [0], np.int64)
        self.parts += [(ts, ids, recode[thread], start) for ts, ids, thread, start in other.parts]

    def correlate(self, cols: Columns) -> int:
        """Give each launch and GPU activity without a correlation id the id of the flow bound to it, in place
        (the column as it is; `corr` is int32 or wider); return how many got one."""
        wanted = [c for c in (cols.code("cats", name) for name in (*LAUNCH_CATEGORIES, *GPU_CATEGORIES)) if c >= 0]
        rows = np.flatnonzero(np.isin(cols.cat, wanted) & (cols.corr == -1)) if self.parts and wanted else ()
        if not len(rows):
            return 0
        ts, ids, thread, start = (np.concatenate(x) for x in zip(*self.parts, strict=True))
        bound = dict(zip(zip(thread.tolist(), ts.tolist(), start.tolist(), strict=True), ids.tolist(), strict=True))
        launch = set(cols.code("cats", name) for name in LAUNCH_CATEGORIES)
        ours = [self.threads.get(t, -1) for t in cols.threads]
        found = 0
        for row, thread_code, t, cat in zip(rows.tolist(), cols.thread[rows].tolist(), cols.ts[rows].tolist(),
                                            cols.cat[rows].tolist(), strict=True):
            flow = bound.get((ours[thread_code], t, cat in launch))
            if flow is not None:
                cols.corr[row] = flow
                found += 1
        return found


def _usable(flow: Any) -> bool:
    """A flow of the launch-to-GPU kind, each field of the type the format gives it (a trace is untrusted)."""
    return (isinstance(flow.cat, str) and flow.cat in FLOW_CATEGORIES and type(flow.id) is int
            and 0 <= flow.id <= _ID_MAX and type(flow.ts) in (int, float) and math.isfinite(flow.ts)
            and all(type(x) in (int, str) for x in (flow.pid, flow.tid)))
