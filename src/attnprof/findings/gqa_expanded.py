"""gqa-expanded: grouped K/V heads copied out to the query heads before attention.

Hand-written grouped-query attention (and transformers' `repeat_kv`) makes K and V as wide as Q by
copying: `repeat_interleave` / `repeat`, or `expand(...)` then `reshape`/`contiguous`/`flatten`, which
copies the stride-0 view. Each copy writes groups x the K/V bytes and reads them back in the matmul;
in decode, where reading the cache is the whole cost, it multiplies it. SDPA and flex_attention take the
grouped heads as they are with enable_gqa=True (SDPA's math backend still expands inside, where it is not
the user's code and not counted here). Found among the ops user code called, before an attention call
of the same forward; bytes from the copies' destinations (record_shapes) or the Memcpy's size.
"""

from __future__ import annotations

import numpy as np

from attnprof.analysis import attention_calls as at
from attnprof.analysis.attribution import Analysis, Forward
from attnprof.analysis.phases import unit
from attnprof.analysis.rows import first_starts, first_threads
from attnprof.findings import _common as c
from attnprof.gpu import kernel_names as kn
from attnprof.trace.reader import Event
from attnprof.units import count, mib, us

REPEATS = frozenset({"aten::repeat_interleave", "aten::repeat"})
AFTER_EXPAND = frozenset({"aten::reshape", "aten::contiguous", "aten::clone", "aten::flatten"})
EXPAND = frozenset({"aten::expand"})
FIX = ("pass K and V with their own heads and call scaled_dot_product_attention(..., enable_gqa=True) "
       "(torch >= 2.5) or flex_attention(..., enable_gqa=True): the kernel reads each K/V head for its group "
       "of query heads, with no copy")


def expansions(a: Analysis, fwd: Forward) -> list[Event]:
    """The ops of the forward that copy K/V out to more heads, before an attention call on their thread."""
    starts = {}  # per thread, the start of its last attention call (read from the columns: no op made)
    ops = [call.ops for call in at.calls(a, fwd)]
    for key, ts in zip(first_threads(ops), first_starts(ops), strict=True):
        if key is not None:
            starts[key] = max(starts.get(key, ts), ts)
    found = []
    for key, top in at.top_ops(a, fwd).items():
        before = int(np.searchsorted(top.ts, starts.get(key, -1.0), side="right"))  # top ops by start
        repeat, after, expand = at.marks(*fwd.name_codes(top.at[:before]), REPEATS, AFTER_EXPAND, EXPAND)
        widened = repeat | (after & np.concatenate(([False], expand[:-1])))  # a copy right after an expand
        found += [op for i in np.flatnonzero(widened).tolist() if _head_shaped(op := fwd.cpu_ops[top.at[i]])]
    return found


def _head_shaped(op: Event) -> bool:
    """[B, H, S, D] into repeat_interleave, [B, Hkv, groups, S, D] into the copy after expand; unknown: yes."""
    shape = at.dims(op, 0)
    return shape is None or len(shape) == (4 if op.name in REPEATS else 5)


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    n = 0.0
    times = [0.0] * len(a.forwards)  # per forward: the cost is their median, as the forward's time is
    nbytes: float | None = 0.0
    kernels: dict[str, int] = {}
    for i, fwd in enumerate(a.forwards):
        for op in expansions(a, fwd):
            n += 1
            acts = c.kernels_under(a, fwd, [op])
            times[i] += sum(x.event.dur for x in acts) if a.has_gpu else op.dur
            for x in acts:
                kernels[kn.short_name(x.event.name)] = kernels.get(kn.short_name(x.event.name), 0) + 1
            size = _bytes(a, fwd, op, acts)
            nbytes = None if nbytes is None or size is None else nbytes + size
    if not n:
        return []
    evidence = {"copies_per_forward": c.per_fwd(n, a), "time_us_per_forward": c.median_over(times),
                "bytes_per_forward": None if nbytes is None else c.per_fwd(nbytes, a),
                "kernels": {k: c.per_fwd(v, a) for k, v in kernels.items()},
                "time_basis": "GPU time of the copies" if a.has_gpu else "host time of the copying ops",
                "unit": unit(a)}
    cost = evidence["time_us_per_forward"]
    message = (f"K/V heads expanded by copying for grouped-query attention: {count(evidence['copies_per_forward'])} "
               f"copies per {evidence['unit']}, {mib(evidence['bytes_per_forward'], 'size unknown')} written, "
               f"{us(cost)}; the attention then reads the widened K/V again")
    return [c.finding("gqa-expanded", c.severity(cost, a), message, evidence, FIX, cost)]


def _bytes(a: Analysis, fwd: Forward, op: Event, acts: list) -> int | None:
    """Bytes the expansion writes: its Memcpy sizes, else its copy_ destinations (record_shapes)."""
    copies = [x.event.args.bytes for x in acts if x.kind == "memcpy" and x.event.args and x.event.args.bytes]
    if copies:
        return sum(copies)
    sizes = [c.tensor_bytes(cp, 0) for cp in at.inside(a, fwd, op, "aten::copy_")]
    return sum(sizes) if sizes and None not in sizes else None


RULE = c.Rule("gqa-expanded", scope="local", waste=True, check=check, walks_op_trees=True)
