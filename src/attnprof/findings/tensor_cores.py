"""tensor-cores: for each GEMM and attention kernel, whether it runs on tensor cores.

Read from name fingerprints only (kernel_names.decode): `wgmma`/`gmma` (Hopper warpgroup MMA),
`s16816`/`h1688`/`hmma` (mma.sync shapes), cuBLAS's nvjet with 16-bit types, fused attention
families that only have tensor-core code; `ffma`/`sgemm`/`simt` mean CUDA cores. A name with no
fingerprint (Triton) stays unknown: the trace cannot tell. The evidence lists the EVIDENCE_LISTED kernels of
the most time (ties: first seen first) and sums up the rest in `kernels_not_listed`; the split by state
counts every kernel.
"""

from __future__ import annotations

from attnprof.analysis.attribution import Analysis
from attnprof.findings import _common as c
from attnprof.gpu import kernel_names as kn
from attnprof.units import count, us

STATE = {True: "tensor cores", False: "CUDA cores", None: "unknown"}
NO_FINGERPRINT = "no fingerprint in the name"


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    if not a.has_gpu:
        return []
    dur = c.all_gpu(a).dur
    found = c.kernels_named(a, _gemm_or_attention, kn.GEMM | kn.ATTENTION)
    if not found:
        return []
    names, sizes = list(found), [len(at) for at in found.values()]
    totals = [sum(dur[at].tolist()) for at in found.values()]
    order = sorted(range(len(names)), key=lambda k: -totals[k])  # the most time first, ties first seen first
    each = {n: c.per_fwd(n, a) for n in set(sizes)}  # a few distinct counts
    times = [c.per_fwd(totals[k], a) for k in order]
    states = [kn.decode(names[k]).tensor_cores for k in order]
    split, counts = {}, {}
    for k in (True, False, None):
        mine = [i for i, state in enumerate(states) if state is k]
        split[STATE[k]] = round(sum(times[i] for i in mine), 3)
        counts[STATE[k]] = sum(each[sizes[order[i]]] for i in mine)
    listed, rest = c.bounded(order, sizes, totals, a)
    rows = [_row(names[k], each[sizes[k]], t) for k, t in zip(listed, times, strict=False)]
    cost = split["CUDA cores"]
    evidence = {"kernels": rows, "time_us_per_forward": split, "per_forward": counts}
    if rest:
        evidence["kernels_not_listed"] = rest
    parts = [f"{count(n)} {'on ' if k != 'unknown' else ''}{k} ({us(split[k])})"
             for k, n in counts.items() if n]
    message = f"GEMM and attention kernels {c.per_unit(a, facts)}: {', '.join(parts)}"
    slow = [kn.decode(names[k]) for k, state in zip(order, states, strict=True) if state is False][:1]
    if slow:
        message += f"; on CUDA cores: {slow[0].short} ({slow[0].basis or NO_FINGERPRINT})"
    unknown = [kn.decode(names[k]).short for k, state in zip(order, states, strict=True) if state is None][:3]
    if unknown:
        message += f"; the name does not tell for {', '.join(unknown)}"
    if slow and c.works_in_16bit(a):  # fp32-gemm reports these GEMMs with their casts: count them once
        return [c.finding("tensor-cores", "info", message + "; see fp32-gemm", evidence, None, 0.0)]
    fix = ("feed these GEMMs 16-bit operands, or allow TF32 for fp32 ones (torch.backends.cuda.matmul."
           "allow_tf32 = True), so cuBLAS picks tensor-core kernels") if slow else None
    return [c.finding("tensor-cores", c.severity(cost, a) if slow else "info", message, evidence, fix, cost)]


def _row(name: str, per_forward: float, time_us_per_forward: float) -> dict:
    info = kn.decode(name)
    return {"name": name, "short": info.short, "tensor_cores": info.tensor_cores,
            "path": info.tensor_core_path, "dtype": info.dtype, "basis": info.basis or NO_FINGERPRINT,
            "per_forward": per_forward, "time_us_per_forward": time_us_per_forward}


def _gemm_or_attention(name: str) -> bool:  # (asked only of names that could be either's: decoded at once)
    return (info := kn.decode(name)).is_gemm or info.is_attention


RULE = c.Rule("tensor-cores", scope="forward", waste=False, check=check)
