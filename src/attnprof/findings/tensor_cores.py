"""tensor-cores: for each GEMM and attention kernel, whether it runs on tensor cores.

Read from name fingerprints only (kernel_names.decode): `wgmma`/`gmma` (Hopper warpgroup MMA),
`s16816`/`h1688`/`hmma` (mma.sync shapes), cuBLAS's nvjet with 16-bit types, fused attention
families that only have tensor-core code; `ffma`/`sgemm`/`simt` mean CUDA cores. A name with no
fingerprint (Triton) stays unknown: the trace cannot tell. The evidence lists the EVIDENCE_LISTED kernels of
the most time (ties: first seen first) and sums up the rest in `kernels_not_listed`; the split by state
counts every kernel.
"""

from __future__ import annotations

from itertools import islice

import numpy as np

from attnprof.analysis import queries as q
from attnprof.analysis.attribution import Analysis
from attnprof.findings import _common as c
from attnprof.gpu import kernel_names as kn
from attnprof.units import count, us

STATE = {True: "tensor cores", False: "CUDA cores", None: "unknown"}
NO_FINGERPRINT = "no fingerprint in the name"


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    if not a.has_gpu:
        return []
    dur, groups = c.all_gpu(a).dur, c.kernels_by_name(a)
    bits = c.kernel_bits(a, c.all_gpu(a))[groups.positions[groups.bounds[:-1]]]  # per name's group: its first's
    found = np.flatnonzero(bits & (q.IS_GEMM | q.IS_ATTENTION))  # the groups of GEMM and attention kernels
    if not len(found):
        return []
    places = [groups.positions[lo:hi] for lo, hi in zip(groups.bounds[found].tolist(),
                                                        groups.bounds[found + 1].tolist(), strict=True)]
    sizes, totals = [len(at) for at in places], [sum(dur[at].tolist()) for at in places]
    order = sorted(range(len(found)), key=lambda k: -totals[k])  # the most time first, ties first seen first
    each = {n: c.per_fwd(n, a) for n in set(sizes)}  # a few distinct counts
    times = [c.per_fwd(totals[k], a) for k in order]
    states = [_state(bits[found[k]]) for k in order]

    def name(k: int) -> str:  # made only for the kernels the finding names: not the thousands of a unique trace
        return groups.names[int(groups.codes[found[k]])]
    split, counts = {}, {}
    for k in (True, False, None):
        mine = [i for i, state in enumerate(states) if state is k]
        split[STATE[k]] = round(sum(times[i] for i in mine), 3)
        counts[STATE[k]] = sum(each[sizes[order[i]]] for i in mine)
    listed, rest = c.bounded(order, sizes, totals, a)
    rows = [_row(name(k), each[sizes[k]], t) for k, t in zip(listed, times, strict=False)]
    slow_at = [places[order[i]] for i, state in enumerate(states) if state is False]
    cost = c.median_over(c.each_forward(a, np.concatenate(slow_at))) if slow_at else 0.0  # as the forward's
    evidence = {"kernels": rows, "time_us_per_forward": split, "per_forward": counts}
    if rest:
        evidence["kernels_not_listed"] = rest
    slow = [kn.decode(name(k)) for k in _first(order, states, False, 1)]
    unknown = [kn.decode(name(k)).short for k in _first(order, states, None, 3)]
    message = _message(c.per_unit(a, facts), split, counts, slow, unknown)
    if slow and c.works_in_16bit(a):  # fp32-gemm reports these GEMMs with their casts: count them once
        return [c.finding("tensor-cores", "info", message + "; see fp32-gemm", evidence, None, 0.0)]
    fix = ("feed these GEMMs 16-bit operands, or allow TF32 for fp32 ones (torch.backends.cuda.matmul."
           "allow_tf32 = True), so cuBLAS picks tensor-core kernels") if slow else None
    return [c.finding("tensor-cores", c.severity(cost, a) if slow else "info", message, evidence, fix, cost)]


def _message(each: str, split: dict, counts: dict, slow: list[kn.KernelInfo], unknown: list[str]) -> str:
    parts = [f"{count(n)} {'on ' if k != 'unknown' else ''}{k} ({us(split[k])})" for k, n in counts.items() if n]
    message = f"GEMM and attention kernels {each}: {', '.join(parts)}"
    if slow:
        message += f"; on CUDA cores: {slow[0].short} ({slow[0].basis or NO_FINGERPRINT})"
    if unknown:
        message += f"; the name does not tell for {', '.join(unknown)}"
    return message


def _row(name: str, per_forward: float, time_us_per_forward: float) -> dict:
    info = kn.decode(name)
    return {"name": name, "short": info.short, "tensor_cores": info.tensor_cores,
            "path": info.tensor_core_path, "dtype": info.dtype, "basis": info.basis or NO_FINGERPRINT,
            "per_forward": per_forward, "time_us_per_forward": time_us_per_forward}


def _state(bits: int) -> bool | None:
    """decode's tensor_cores, from `kernel_bits`."""
    return True if bits & q.TENSOR_CORES else False if bits & q.CUDA_CORES else None


def _first(order: list[int], states: list[bool | None], state: bool | None, n: int) -> list[int]:
    """The first `n` kernels of `order` in `state` (states: in `order`'s order)."""
    return list(islice((k for k, s in zip(order, states, strict=True) if s is state), n))


RULE = c.Rule("tensor-cores", scope="forward", waste=False, check=check)
