"""sm-underfill: a dominant kernel whose grid leaves SMs idle.

A grid of fewer blocks than the GPU holds at once (SMs x resident blocks per SM, from the occupancy
calculation) leaves the rest of the SMs idle for the whole kernel; a grid a little over a whole number of
such waves leaves them idle for its last, short wave (the tail). Decode is the usual case: one query per
sequence gives B x H blocks, fewer than the SMs, unless the kernel splits the KV sequence across blocks
(flash's splitkv kernel and its combine kernel, cuDNN's lean attention and its reduction): split-KV kernels
are recognised by name and said so. The share of SM time left idle is 1 - waves / ceil(waves). NCCL's kernels
run on few blocks by design (their speed is the links', not the SMs'): never this finding.
"""

from __future__ import annotations

import math
import re

import numpy as np

from attnprof.analysis.attribution import Analysis
from attnprof.analysis.comm import is_comm
from attnprof.findings import _common as c
from attnprof.gpu import kernel_names as kn
from attnprof.gpu.occupancy import theoretical
from attnprof.trace.reader import Args
from attnprof.units import us

DOMINANT = 0.25  # a kernel taking this share of the region's GPU time or more
FILLED = 0.8  # waves / ceil(waves) at or above this is a full enough GPU
SPLIT_KV = re.compile(r"split_?kv|lean_|combine", re.IGNORECASE)


def _waves(a: Analysis, args: Args | None) -> tuple[float, int, int] | None:
    """(waves, blocks, blocks the GPU holds at once) of a kernel launch with `args`; None without them."""
    props = (a.trace.device_properties or [{}])[0]
    if not (args and args.grid and args.block and args.registers_per_thread is not None and props.get("numSms")):
        return None
    occ = theoretical(args.registers_per_thread, args.shared_memory or 0, math.prod(args.block), props)
    if occ is None or not occ.blocks_per_sm:
        return None
    capacity = occ.blocks_per_sm * props["numSms"]
    blocks = math.prod(args.grid)
    return blocks / capacity, blocks, capacity


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    if not a.has_gpu:
        return []
    total = sum(f.gpu_time_us for f in a.forwards)
    rows = [r for name, at in _dominant(a, total) if (r := _row(a, name, at, total))]
    if not rows:
        return []
    rows.sort(key=lambda r: -r["idle_us_per_forward"])
    cost = sum(r["idle_us_per_forward"] for r in rows)
    evidence = {"kernels": rows, "idle_us_per_forward": round(cost, 3)}
    return [c.finding("sm-underfill", c.severity(cost, a), _message(rows[0]), evidence, _fix(rows[0]), cost)]


def _dominant(a: Analysis, total: float) -> list[tuple[str, np.ndarray]]:
    """The kernels by name (`kernels_by_name`'s groups, in order) that may take DOMINANT of `total` or more:
    by NumPy's sums, a hair below the share so that none `_row`'s own sum keeps is missed (a trace of unique
    names has tens of thousands of names, none dominant: no str made for them)."""
    groups = c.kernels_by_name(a)
    durs = c.all_gpu(a).dur[groups.positions]
    if not total or not len(durs):
        return []
    sums, sizes = np.add.reduceat(durs, groups.bounds[:-1]), np.add.reduceat(np.abs(durs), groups.bounds[:-1])
    near = np.flatnonzero(sums >= DOMINANT * total - 1e-9 * (sizes + abs(total))).tolist()
    bounds = groups.bounds.tolist()
    return [(groups.names[int(groups.codes[g])], groups.positions[bounds[g]:bounds[g + 1]]) for g in near]


def _row(a: Analysis, name: str, at: np.ndarray, total: float) -> dict | None:
    """The kernels called `name` (at `at` in `all_gpu(a)`) when they dominate and leave SMs idle."""
    gpu = c.all_gpu(a)
    time = sum(gpu.dur[at].tolist())
    if not total or time / total < DOMINANT or is_comm(name):  # (first: on a trace of unique names none dominates)
        return None
    found = _waves(a, gpu.arg_sets[int(gpu.args[at[0]])])
    if found is None:
        return None
    waves, blocks, capacity = found
    filled = waves / math.ceil(waves)
    if filled >= FILLED:
        return None
    return {"name": name, "short": kn.short_name(name), "blocks": blocks, "blocks_at_once": capacity,
            "waves": round(waves, 3), "filled": round(filled, 3), "split_kv": bool(SPLIT_KV.search(name)),
            "share_of_region": round(time / total, 4), "time_us_per_forward": (typical := c.median_over(
                c.each_forward(a, at))),  # the median over the forwards, as the forward's own time
            "idle_us_per_forward": round(typical * (1 - filled), 3)}


def _message(r: dict) -> str:
    shape = (f"{r['blocks']} blocks where the GPU holds {r['blocks_at_once']} at once"
             if r["waves"] < 1 else f"{r['waves']:g} waves of {r['blocks_at_once']} blocks: the last one short")
    split = " (a split-KV kernel: it already divides the sequence across blocks)" if r["split_kv"] else ""
    return (f"{r['short']}{split}: {shape}, so {1 - r['filled']:.0%} of SM time idles; it takes "
            f"{r['share_of_region']:.0%} of the region's GPU time, ~{us(r['idle_us_per_forward'])} idle")


def _fix(r: dict) -> str:
    if r["split_kv"]:
        return "more work per call (more sequences per decode batch), or more KV splits if the kernel takes a count"
    return ("give the GPU more blocks: more sequences or heads per call, a split-KV (flash-decoding) kernel for "
            "decode (SDPA's flash and cuDNN backends split it), or smaller tiles")


RULE = c.Rule("sm-underfill", scope="forward", waste=True, check=check)
