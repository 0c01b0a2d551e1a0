"""Which launch started each GPU activity, and which region holds each launch: array operations on the
trace's columns (trace.columns), no Python call per event. Imports no torch.

A GPU activity and its launch (a `cuda_runtime`/`cuda_driver` event) carry the same `args.correlation`.
Each process counts its ids from 1, so two processes in one trace (merged ranks, a DataLoader worker)
share ids: an id that one launch carries is a sorted-search lookup; the few that several carry are
settled one by one (`_settle_shared`).
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np

from attnprof.analysis.nesting import open_parents
from attnprof.trace.columns import Columns
from attnprof.trace.reader import Event

NONE = -1  # the correlation column's "no id"


def launches_of(cols: Columns, launch_rows: np.ndarray, gpu_rows: np.ndarray) -> np.ndarray:
    """Per GPU activity (of `gpu_rows`): the row of its launch, -1 for none."""
    ids = cols.corr[launch_rows]
    carried = np.flatnonzero(ids != NONE)
    known, first, counts = np.unique(ids[carried], return_index=True, return_counts=True)  # first: in trace order
    wanted = cols.corr[gpu_rows]
    out = np.full(len(gpu_rows), -1, np.int64)
    if not len(known):
        return out
    at = np.minimum(np.searchsorted(known, wanted), len(known) - 1)
    hit = (known[at] == wanted) & (wanted != NONE)
    out[hit] = launch_rows[carried[first[at[hit]]]]
    if (counts > 1).any():
        shared = hit & np.isin(wanted, known[counts > 1])
        _settle_shared(cols, launch_rows[carried], gpu_rows, out, shared)
    return out


def _settle_shared(cols: Columns, launch_rows: np.ndarray, gpu_rows: np.ndarray, out: np.ndarray,
                   shared: np.ndarray) -> None:
    """Fill `out` where `shared`: the launch is one of the activity's process (known from the ids no other
    process uses), else the latest to start before the activity (work runs after its launch), ties to
    the least used; activities in start order."""
    ts, pid, corr = cols.ts, cols.pid, cols.corr
    candidates: dict[int, list[int]] = defaultdict(list)  # id -> its launches' rows, in trace order
    wanted = set(corr[gpu_rows[shared]].tolist())
    for row, c in zip(launch_rows.tolist(), corr[launch_rows].tolist(), strict=True):
        if c in wanted:
            candidates[c].append(row)
    plain = (out >= 0) & ~shared
    owners: dict[int, set] = defaultdict(set)  # GPU lane (its pid) -> the processes that launch on it
    for lane, launcher in zip(pid[gpu_rows[plain]].tolist(), pid[out[plain]].tolist(), strict=True):
        owners[lane].add(launcher)
    used: Counter = Counter()
    picked = np.flatnonzero(shared)
    for i in picked[np.argsort(ts[gpu_rows[picked]], kind="stable")].tolist():
        row = int(gpu_rows[i])
        found = candidates[int(corr[row])]
        found = [x for x in found if pid[x] == pid[row] or int(pid[x]) in owners[int(pid[row])]] or found
        found = [x for x in found if ts[x] <= ts[row]] or found
        launch = max(found, key=lambda x: (ts[x], -used[x]))
        used[launch] += 1
        out[i] = launch


def regions_of(regions: list[Event], cols: Columns, rows: np.ndarray) -> np.ndarray:
    """Per event of `rows`: the index of the region (same process, `regions` by start) whose host time
    range holds its start, the latest-starting of those (the innermost); -1 for none. Each process's
    regions are searched by start, then every event not held follows the links to the latest earlier
    region still open, all events at once."""
    out = np.full(len(rows), -1, np.int64)
    by_pid: dict[int | str, list[int]] = defaultdict(list)
    for i, r in enumerate(regions):
        by_pid[r.pid].append(i)
    code = {p: i for i, p in enumerate(cols.pids)}
    for p, idx in by_pid.items():
        mine = np.flatnonzero(cols.pid[rows] == code.get(p, -2))
        if not len(mine):
            continue
        starts, durs = [regions[i].ts for i in idx], [regions[i].dur for i in idx]
        ends = np.array([s + d for s, d in zip(starts, durs, strict=True)])
        links, at = np.array(open_parents(starts, durs), np.int64), np.asarray(idx, np.int64)
        t = cols.ts[rows[mine]]
        j = np.searchsorted(np.array(starts), t, side="right") - 1
        todo = np.flatnonzero(j >= 0)
        while len(todo):
            held = t[todo] <= ends[j[todo]]
            out[mine[todo[held]]] = at[j[todo[held]]]
            todo = todo[~held]
            j[todo] = links[j[todo]]
            todo = todo[j[todo] >= 0]
    return out
