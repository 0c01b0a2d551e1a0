"""tensor-cores: for each GEMM and attention kernel, whether it runs on tensor cores.

Read from name fingerprints only (kernel_names.decode): `wgmma`/`gmma` (Hopper warpgroup MMA),
`s16816`/`h1688`/`hmma` (mma.sync shapes), cuBLAS's nvjet with 16-bit types, fused attention
families that only have tensor-core code; `ffma`/`sgemm`/`simt` mean CUDA cores. A name with no
fingerprint (Triton) stays unknown: the trace cannot tell.
"""

from __future__ import annotations

from attnprof.analysis.attribution import Analysis
from attnprof.findings import _common as c
from attnprof.gpu import kernel_names as kn
from attnprof.units import count, us

STATE = {True: "tensor cores", False: "CUDA cores", None: "unknown"}


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    if not a.has_gpu:
        return []
    dur = c.all_gpu(a).dur
    found = c.kernels_named(a, _gemm_or_attention, kn.GEMM | kn.ATTENTION)
    times = {name: dur[at].tolist() for name, at in found.items()}
    if not times:
        return []
    sized = sorted(((name, len(d), sum(d)) for name, d in times.items()), key=lambda r: -r[2])
    each = {n: c.per_fwd(n, a) for n in {n for _, n, _ in sized}}  # a few distinct counts
    rows = []
    for name, n, total in sized:
        info = kn.decode(name)
        rows.append({"name": name, "short": info.short, "tensor_cores": info.tensor_cores,
                     "path": info.tensor_core_path, "dtype": info.dtype,
                     "basis": info.basis or "no fingerprint in the name",
                     "per_forward": each[n], "time_us_per_forward": c.per_fwd(total, a)})
    split, counts = {}, {}
    for k in (True, False, None):
        mine = [r for r in rows if r["tensor_cores"] is k]
        split[STATE[k]] = round(sum(r["time_us_per_forward"] for r in mine), 3)
        counts[STATE[k]] = sum(r["per_forward"] for r in mine)
    cost = split["CUDA cores"]
    evidence = {"kernels": rows, "time_us_per_forward": split, "per_forward": counts}
    parts = [f"{count(n)} {'on ' if k != 'unknown' else ''}{k} ({us(split[k])})"
             for k, n in counts.items() if n]
    message = f"GEMM and attention kernels {c.per_unit(a, facts)}: {', '.join(parts)}"
    slow = [r for r in rows if r["tensor_cores"] is False]
    if slow:
        message += f"; on CUDA cores: {slow[0]['short']} ({slow[0]['basis']})"
    unknown = [r["short"] for r in rows if r["tensor_cores"] is None]
    if unknown:
        message += f"; the name does not tell for {', '.join(unknown[:3])}"
    if slow and c.works_in_16bit(a):  # fp32-gemm reports these GEMMs with their casts: count them once
        return [c.finding("tensor-cores", "info", message + "; see fp32-gemm", evidence, None, 0.0)]
    fix = ("feed these GEMMs 16-bit operands, or allow TF32 for fp32 ones (torch.backends.cuda.matmul."
           "allow_tf32 = True), so cuBLAS picks tensor-core kernels") if slow else None
    return [c.finding("tensor-cores", c.severity(cost, a) if slow else "info", message, evidence, fix, cost)]


def _gemm_or_attention(name: str) -> bool:  # (asked only of names that could be either's: decoded at once)
    return (info := kn.decode(name)).is_gemm or info.is_attention


RULE = c.Rule("tensor-cores", scope="forward", waste=False, check=check)
