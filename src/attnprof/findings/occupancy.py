"""occupancy: theoretical occupancy per kernel, its limiting resource, next to CUPTI's estimate.

Computed from the trace's deviceProperties and each kernel's launch args (registers per thread,
shared memory, block) as CUDA's occupancy calculator does (_occupancy_calc). Fused attention
kernels are low by design: 255 registers x 128 threads fit 2 blocks per SM, 8 of 64 warps, 12.5%.

CUPTI's `est. achieved occupancy %` reads 0 for some driver-API launches (`cuLaunchKernelEx`:
cuBLAS's nvjet, cuDNN; flex's Triton kernel) whose grid fills the GPU: a measurement gap, and the
finding says so. A 0 for a grid of a few blocks is a real ~0%, and no gap.
"""

from __future__ import annotations

import math

import numpy as np

from attnprof.analysis.activities import KINDS, GpuColumns, NamedGroups, named_groups
from attnprof.analysis.attribution import Analysis
from attnprof.analysis.kernel_summary import costliest
from attnprof.findings import _common as c
from attnprof.gpu import kernel_names as kn
from attnprof.gpu.occupancy import Occupancy, theoretical
from attnprof.trace.reader import Args

DRIVER_API = ("cuLaunchKernel", "cuLaunchKernelEx")
TOP = 8  # kernels listed, by time per forward


def _props(a: Analysis, args: Args) -> dict:
    props = a.trace.device_properties
    return next((p for p in props if p.get("id") == args.device), props[0] if props else {})


def _row(a: Analysis, gpu: GpuColumns, at: np.ndarray) -> dict:
    """The row of the kernels at `at` in `gpu` (one name and launch shape), None without deviceProperties.
    Without its short name: `_shown` adds it to the few rows listed."""
    first = int(at[0])
    args, name = gpu.arg_sets[int(gpu.args[first])], gpu.names[int(gpu.name[first])]
    threads = math.prod(args.block)
    props = _props(a, args)
    occ = theoretical(args.registers_per_thread or 0, args.shared_memory or 0, threads, props)
    assert occ is not None  # asked only where `_known`
    each = [gpu.arg_sets[code].est_occupancy_pct for code in gpu.args[at].tolist()]
    ests = sorted(x for x in each if x is not None)
    cupti = ests[len(ests) // 2] / 100 if ests else None
    api = gpu.names[int(gpu.launch_name[first])] if gpu.launch_name[first] >= 0 else None
    grid, sms = math.prod(args.grid) if args.grid else None, props.get("numSms")
    return {"name": name,
            "theoretical_occupancy": round(occ.fraction, 4), "limiter": occ.limiter, "cupti_estimate": cupti,
            "cupti_gap": _gap(api, cupti, occ, args.grid, sms, threads, props),
            "registers_per_thread": args.registers_per_thread, "shared_memory_bytes": args.shared_memory,
            "block_threads": threads, "blocks_per_sm": occ.blocks_per_sm, "warps_per_sm": occ.warps_per_sm,
            "max_warps_per_sm": occ.max_warps,
            "waves": round(grid / (occ.blocks_per_sm * sms), 2) if grid and sms else None, "launch_api": api,
            "fused": kn.decode(name).is_attention, "per_forward": c.per_fwd(len(at), a),
            "time_us_per_forward": c.per_fwd(sum(gpu.dur[at].tolist()), a)}


def _known(a: Analysis, args: Args) -> bool:
    """Whether the occupancy of kernels launched with `args` is known (`_row` is not None): the trace has
    the device's properties."""
    props = _props(a, args)
    return theoretical(args.registers_per_thread or 0, args.shared_memory or 0, math.prod(args.block),
                       props) is not None


def _kernel_shapes(gpu: GpuColumns) -> NamedGroups:
    """The kernels with launch args, grouped by name, registers, shared memory and block, first seen first
    (each group's positions in order): each distinct set of launch args given its shape's code once, the
    kernels grouped by name and shape code in one go (a trace of unique names has a group per kernel)."""
    shapes: dict[tuple, int] = {}
    shape = np.array([shapes.setdefault((x.registers_per_thread, x.shared_memory, tuple(x.block)), len(shapes))
                      if x is not None and x.block and x.registers_per_thread is not None else -1
                      for x in gpu.arg_sets], np.int64)
    kernels = np.flatnonzero((gpu.kind == KINDS.index("kernel")) & (shape[gpu.args] >= 0))
    return named_groups(gpu.names, gpu.name[kernels].astype(np.int64) * len(shapes) + shape[gpu.args[kernels]],
                        kernels)


def _gap(api: str | None, cupti: float | None, occ: Occupancy, grid: list[int] | None, sms: int | None,
         threads: int, props: dict) -> bool:
    """CUPTI's 0 for a driver-API launch whose grid would show at least 1%: a measurement gap, not a
    tiny grid (a 1-block kernel really occupies ~0% of the GPU)."""
    if api not in DRIVER_API or cupti != 0:
        return False
    if not (grid and sms):
        return True
    warps = math.prod(grid) * math.ceil(threads / props["warpSize"])
    return min(occ.fraction, warps / (sms * occ.max_warps)) >= 0.01


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    gpu = c.all_gpu(a)
    groups = _kernel_shapes(gpu)
    at, bounds = groups.positions, groups.bounds
    first_args = gpu.args[at[bounds[:-1]]]
    # asked once per launch args (a trace of unique names has a group per kernel, and a few distinct args)
    known_args = np.zeros(len(gpu.arg_sets), np.bool_)
    for code in set(first_args.tolist()):  # (np.unique would import numpy.ma: 1 MB, for nothing)
        known_args[code] = _known(a, gpu.arg_sets[code])
    known = np.flatnonzero(known_args[first_args])
    if not len(known):
        return []
    # by time per forward, as the rows' own field (ties first seen first); the full row only for those listed
    top = costliest(gpu.dur[at], bounds, TOP, c.n_forwards(a), known)
    shown = [_shown(_row(a, gpu, at[bounds[g]:bounds[g + 1]])) for g in top]
    evidence = {"kernels": shown, "more_kernels": max(len(known) - TOP, 0)}
    message = "; ".join(_explain(r) for r in shown[:3])
    return [c.finding("occupancy", "info", message, evidence, None, 0.0)]


def _shown(row: dict) -> dict:
    """`row` with its kernel's short name second, where it always was: made only for the rows listed (a
    trace of unique names has a row per kernel, and a template name takes tens of us to shorten)."""
    return {"name": row["name"], "short": kn.short_name(row["name"]), **row}


def _explain(r: dict) -> str:
    smem = f", {r['shared_memory_bytes']} B shared" if r["shared_memory_bytes"] else ""
    text = (f"{r['short']}: {r['registers_per_thread']} registers x {r['block_threads']} threads{smem} → "
            f"{r['blocks_per_sm']} block(s)/SM (limited by {r['limiter']}) → {r['warps_per_sm']} of "
            f"{r['max_warps_per_sm']} warps = {r['theoretical_occupancy'] * 100:g}% theoretical")
    if r["cupti_gap"]:
        text += f"; CUPTI reports 0% for this {r['launch_api']} launch: a measurement gap, not a measurement"
    elif r["cupti_estimate"] is not None:
        text += f"; CUPTI estimates {r['cupti_estimate']:.0%} achieved"
    if r["fused"] and r["theoretical_occupancy"] <= 0.25:
        text += " (low by design: the fused kernel keeps its tiles in registers and shared memory)"
    return text


RULE = c.Rule("occupancy", scope="forward", waste=False, check=check)
