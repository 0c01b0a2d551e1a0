"""fused-attention: the fused attention kernel(s) each forward launched, their names decoded.

A fused kernel does QK^T, masking, softmax and PV in one launch, keeping the [S, S] scores in
registers and shared memory. Its name says which implementation ran: FlashAttention-2
(`pytorch_flash::flash_fwd_kernel`), xformers/CUTLASS (`fmha_cutlassF_bf16_aligned_64x64_rf_sm80`),
cuDNN (`cudnn_generated_..._sdpa_sm90_flash_fprop_wgmma_...`), Triton/flex (`triton_tem_..._flex_attention`),
hub kernels (`flash::flash_fwd_kernel`); kernel_names.decode reads dtype, tile, architecture and
tensor-core path from it where the name has them. The evidence lists the EVIDENCE_LISTED kernels of the most
time per forward (ties: first seen first) and sums up the rest in `kernels_not_listed`.
"""

from __future__ import annotations

import numpy as np

from attnprof.analysis.attribution import Analysis
from attnprof.analysis.columns import distinct
from attnprof.findings import _common as c
from attnprof.gpu import kernel_names as kn
from attnprof.units import count, us

FIELDS = ("family", "library", "dtype", "tile", "arch", "tensor_core_path", "tensor_cores", "notes")


def _row(a: Analysis, name: str, at: np.ndarray, total: float) -> dict:
    """The row of the kernels called `name`, at `at` in `all_gpu(a)`, `total` their time."""
    gpu = c.all_gpu(a)
    info = kn.decode(name).as_dict()
    launch = {gpu.names[code] for code in distinct(gpu.launch_name[at]).tolist() if code >= 0}
    return {"name": name, "short": kn.short_name(name), **{k: info[k] for k in FIELDS},
            "per_forward": c.per_fwd(len(at), a), "avg_us": round(total / len(at), 3),
            "time_us_per_forward": c.per_fwd(total, a), "launched_with": sorted(launch)}


def _describe(r: dict) -> str:
    parts = [r["dtype"], f"tile {r['tile']}" if r["tile"] else None,
             f"{r['arch']} code" if r["arch"] else None,
             f"tensor cores via {r['tensor_core_path']}" if r["tensor_cores"] else None]
    known = ", ".join(p for p in parts if p)
    return f"{r['family']} ({r['short']}{'; ' + known if known else ''})"


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    if not a.has_gpu:
        return []
    found = c.kernels_named(a, kn.is_attention, kn.ATTENTION)
    others = len(c.all_gpu(a).dur) - sum(len(at) for at in found.values())
    if not found:
        return []
    dur, names, places = c.all_gpu(a).dur, list(found), list(found.values())
    totals = [sum(dur[at].tolist()) for at in places]
    times = [c.per_fwd(t, a) for t in totals]
    order = sorted(range(len(names)), key=lambda k: -times[k])  # the most time first, ties first seen first
    listed, rest = c.bounded(order, [len(at) for at in places], totals, a)
    rows = [_row(a, names[k], places[k], totals[k]) for k in listed]
    n = sum(c.per_fwd(len(places[k]), a) for k in order)
    cost = sum(times[k] for k in order)
    evidence = {"kernels": rows, "per_forward": n, "time_us_per_forward": round(cost, 3),
                "other_gpu_activities_per_forward": c.per_fwd(others, a)}
    if rest:
        evidence["kernels_not_listed"] = rest
    what = "; ".join(_describe(r) for r in rows[:3])
    each = c.per_unit(a, facts)
    message = (f"{count(n)} fused attention kernel(s) {each}: {what}; {us(cost)} {each} "
               f"(avg {us(rows[0]['avg_us'])} per launch)")
    return [c.finding("fused-attention", "info", message, evidence, None, cost)]


RULE = c.Rule("fused-attention", scope="local", waste=False, check=check)
