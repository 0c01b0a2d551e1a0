"""Launch-to-GPU flow events, for traces whose launches and kernels carry no `args.correlation`: Kineto links
each launch to its GPU work twice, by the correlation id in both events' args and by a flow (`ph` "s" on the
launch, "f" on the kernel, the same `id`, category `ac2g`; `async` in the 2021 schema). Some producers and
converters keep only the flows; the id is then read from them. A flow is bound to its event by process,
thread and start time (the flow's `ts` is the event's). Kept compactly (a few arrays a piece), and used only
when some launch or GPU activity has no correlation. Imports no torch.
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np

from attnprof.trace.columns import Columns
from attnprof.trace.events import CATEGORY_ALIASES, GPU_CATEGORIES, LAUNCH_CATEGORIES

FLOW_CATEGORIES = frozenset({"ac2g", "async"})
# the events a flow links: launches and GPU activities, in either schema's names
LINKED = frozenset((*LAUNCH_CATEGORIES, *GPU_CATEGORIES,
                    *(old for old, new in CATEGORY_ALIASES.items() if new in (*LAUNCH_CATEGORIES, *GPU_CATEGORIES))))
_TS, _ID, _PID, _TID = (attrgetter(name) for name in ("ts", "id", "pid", "tid"))


class Flows:
    """The flows of a trace: per flow its start time, id, thread (a code into `threads`) and whether it
    starts (on the launch) or finishes (on the GPU activity)."""

    def __init__(self) -> None:
        self.threads: dict[tuple, int] = {}  # (pid, tid) -> code
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, flows: list, starts: bool) -> None:
        """Decoded flow structs (wire.FLOW_START / FLOW_END: id, cat, pid, tid, ts typed) of one phase: starts
        ("s") or finishes ("f"). A few C-level passes: a trace has a flow or two per kernel."""
        kept = [f for f in flows if f.cat in FLOW_CATEGORIES]
        if not kept:
            return
        ts = np.fromiter(map(_TS, kept), np.float64, len(kept))
        ids = np.fromiter(map(_ID, kept), np.int64, len(kept))
        keys = list(zip(map(_PID, kept), map(_TID, kept), strict=True))
        for key in dict.fromkeys(keys):
            self.threads.setdefault(key, len(self.threads))
        thread = np.fromiter(map(self.threads.__getitem__, keys), np.int64, len(keys))
        ok = np.isfinite(ts)
        self.parts.append((ts[ok], ids[ok], thread[ok], np.full(int(ok.sum()), starts)))

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



def needs_flows(events: list) -> bool | None:
    """Whether a trace whose decoded complete events these are needs its flows: some launch or GPU activity
    carries no correlation (decoded, no correlation reads -1); None while it has none of them."""
    linked = [e for e in events if e.cat in LINKED]
    if not linked:
        return None
    return any(e.args is None or e.args.correlation is None or e.args.correlation == -1 for e in linked)
