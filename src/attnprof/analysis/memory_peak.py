"""The memory a call holds at its peak and what holds it, from a trace recorded with `profile_memory=True`.
Imports no torch.

The profiler writes one `[memory]` instant event per allocation (Bytes > 0) and free (Bytes < 0) of the
allocator, with its address and the allocator's running total. Walked in time order inside the region, the
live allocations are known at every moment: the peak is the highest total above what was allocated when the
region began (the inputs, the weights: the call's own memory is what it adds), and at that moment each live
allocation is charged to the innermost host op that made it (`aten::bmm` holding the scores, `aten::softmax`
its probabilities). What the peak holds names the tensor to remove or fuse, which a peak alone does not.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from fnmatch import fnmatchcase

MEMORY = "[memory]"
HOLDERS_LISTED = 5
DEVICE_TYPES = {"cpu": 0, "cuda": 1}  # the profiler's "Device Type" of an allocation
# ops that only allocate for the op around them (SDPA's kernel asks aten::empty for its output): the op
# around them holds the memory
ALLOCATORS = frozenset({"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
                        "aten::new_empty_strided", "aten::resize_", "aten::zeros", "aten::zeros_like"})


def peak(events: Iterable[dict], region: str, device: str = "cpu") -> dict | None:
    """{"peak_bytes": above the region's start, "at_start_bytes", "allocations", "held_by": [{"op", "bytes",
    "allocations"}] (the most first, HOLDERS_LISTED of them, the rest summed as "other ops")}, of the first
    `region` span of `events` (Chrome trace events; `region` may be a pattern: `ProfilerStep#*`); None when the
    trace has no memory events in it."""
    events = list(events)
    span = next((e for e in events if e.get("ph") == "X" and fnmatchcase(str(e.get("name")), region)), None)
    if span is None:
        return None
    start, end = float(span["ts"]), float(span["ts"]) + float(span.get("dur", 0))
    kind = DEVICE_TYPES.get(device, 0)
    memory = sorted((e for e in events if e.get("name") == MEMORY and start <= float(e.get("ts", -1)) <= end
                     and (e.get("args") or {}).get("Device Type", 0) == kind), key=lambda e: float(e["ts"]))
    if not memory:
        return None
    made_by = _innermost_op(events, start, end)
    first = memory[0]["args"]
    at_start = int(first.get("Total Allocated", 0)) - int(first.get("Bytes", 0))
    live: dict[object, tuple[int, str]] = {}
    top, held, count = 0, {}, 0
    for e in memory:
        args = e["args"]
        size, addr = int(args.get("Bytes", 0)), args.get("Addr")
        if size > 0:
            live[addr] = (size, made_by(float(e["ts"])))
            count += 1
        else:
            live.pop(addr, None)
        now = int(args.get("Total Allocated", 0)) - at_start
        if now > top:
            top, held = now, dict(live)
    return {"peak_bytes": top, "at_start_bytes": at_start, "allocations": count, "held_by": _holders(held)}


def _holders(live: dict[object, tuple[int, str]]) -> list[dict]:
    by_op: dict[str, list[int]] = {}
    for size, op in live.values():
        by_op.setdefault(op, []).append(size)
    rows = sorted(({"op": op, "bytes": sum(s), "allocations": len(s)} for op, s in by_op.items()),
                  key=lambda r: -r["bytes"])
    rest = rows[HOLDERS_LISTED:]
    if rest:
        rows = [*rows[:HOLDERS_LISTED], {"op": "other ops", "bytes": sum(r["bytes"] for r in rest),
                                         "allocations": sum(r["allocations"] for r in rest)}]
    return rows


def _innermost_op(events: list[dict], start: float, end: float):
    """A function of a time: the name of the innermost host op running then that is not a bare allocator
    (the one that began last of those that span it), or "(region)"."""
    ops = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), str(e.get("name")))
                 for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"
                 and start <= float(e.get("ts", -1)) <= end)
    starts = [o[0] for o in ops]

    def at(ts: float) -> str:
        for i in range(bisect_right(starts, ts) - 1, -1, -1):
            if ops[i][1] >= ts and ops[i][2] not in ALLOCATORS:
                return ops[i][2]
        return "(region)"

    return at
