"""GPU activities by the stream they ran on, as the timeline labels streams: each activity's (device, stream) from
its args (Kineto's "device" and "stream"), else from its process and thread; and the activities that start before
the one before them on their stream has ended (a programmatic dependent launch places kernels so), which every sum
of activity times counts twice. Imports no torch.
"""

from __future__ import annotations

import numpy as np

from attnprof.gpu.kernel_info import short_name
from attnprof.trace.columns import Columns
from attnprof.units import us


def arg_labels(cols: Columns, rows: np.ndarray, field: str, fallback: np.ndarray,
               fallback_names: list) -> tuple[np.ndarray, list]:
    """Per activity of `rows`, a code for its args' `field` (device or stream), else for its `fallback` column's
    value (pid or thread: Kineto's GPU rows), and the label of each code: array operations, no str per event."""
    said = [getattr(s, field) if s is not None else None for s in cols.arg_sets] + [None]  # args code -1: none
    labels = list(dict.fromkeys(v for v in said if v is not None))
    code_of = {v: i for i, v in enumerate(labels)}
    table = np.array([code_of[v] if v is not None else -1 for v in said], np.int64)
    code = table[cols.args[rows]]
    missing = code < 0
    code[missing] = len(labels) + fallback[rows[missing]]
    return code, labels + list(fallback_names)


def stream_codes(cols: Columns, rows: np.ndarray) -> np.ndarray:
    """Per GPU activity of `rows`, a code for its (device, stream), as the timeline labels them (arg_labels)."""
    device, _ = arg_labels(cols, rows, "device", cols.pid, cols.pids)
    stream, names = arg_labels(cols, rows, "stream", cols.thread, [t[1] for t in cols.threads])
    return device * len(names) + stream


def same_stream_overlaps(cols: Columns, gpu_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of the GPU activities that start before the ones before them on their stream (stream_codes) have
    ended, and by how many µs each: the activities by stream, then start (one sort), each one's overlap with the
    furthest end before it on its stream."""
    codes = stream_codes(cols, gpu_rows)
    order = np.lexsort((cols.ts[gpu_rows], codes))  # stable: ties keep trace order
    rows, codes = gpu_rows[order], codes[order]
    bounds = [0, *(np.flatnonzero(np.diff(codes)) + 1).tolist(), len(rows)]
    found, by = [np.zeros(0, np.intp)], [np.zeros(0)]
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        mine = rows[lo:hi]
        ends = cols.ts[mine] + cols.dur[mine]
        reached = np.maximum.accumulate(ends)[:-1]  # the furthest end of the activities before each one
        over = np.minimum(reached, ends[1:]) - cols.ts[mine[1:]]
        found.append(mine[1:][over > 0])
        by.append(over[over > 0])
    return np.concatenate(found), np.concatenate(by)


NAMES_OVERLAPPING = 3  # the kernels named in the overlap warning, those with the most overlap first


def overlap_warning(cols: Columns, gpu_rows: np.ndarray) -> list[str]:
    """A warning when same_stream_overlaps finds any: a programmatic dependent launch (Hopper and newer) places a
    kernel while the one before it runs, and its span then covers its wait, so every sum of activity times
    (attnprof's per-call and per-kernel figures, torch's key_averages, HTA's kernel tables) counts that stretch
    twice. Said, not corrected: the sums stay what the trace records, as those tools' do."""
    rows, by = same_stream_overlaps(cols, gpu_rows)
    if not len(rows):
        return []
    codes, inverse = np.unique(cols.name[rows], return_inverse=True)
    per_name = np.bincount(inverse, weights=by)
    top = [short_name(cols.names[int(codes[i])]) for i in np.argsort(-per_name, kind="stable")[:NAMES_OVERLAPPING]]
    total = float(cols.dur[gpu_rows].sum())
    return [f"GPU activities that start before the one before them on their stream ends: {len(rows)}, overlapping it "
            f"by {us(float(by.sum()))} in all ({100 * float(by.sum()) / total:.2f}% of the GPU activities' time; "
            f"most: {', '.join(top)}), which every sum of activity times counts twice (a programmatic dependent "
            "launch places kernels so; timestamps rounded to whole microseconds can show it too)"]
