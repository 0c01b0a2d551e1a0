"""launch-api: GPU work launched through the CUDA runtime vs the driver API, per forward.

PyTorch's own kernels go through the runtime (`cudaLaunchKernel`, `cudaLaunchKernelExC`,
`cudaMemcpyAsync`, `cudaMemsetAsync`); cuBLAS's nvjet GEMMs, cuDNN and Triton launch with the
driver API (`cuLaunchKernel`, `cuLaunchKernelEx`). It matters for reading a trace: CUPTI's
occupancy estimate is 0 for driver-API launches, and the launch events sit in a different
category (`cuda_driver`). The evidence lists the EVIDENCE_LISTED API calls of the most launches (ties: first
seen first) and sums up the rest in `per_forward_not_listed` (a trace can name each launch apart).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from attnprof.analysis.activities import GpuColumns
from attnprof.analysis.attribution import Analysis
from attnprof.analysis.name_tests import made_afresh
from attnprof.findings import _common as c
from attnprof.gpu import kernel_names as kn
from attnprof.units import count


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    if not a.has_gpu:
        return []
    gpu = c.all_gpu(a)
    keys, calls, driver_kernels, zeros = _launches(gpu)
    if not len(keys):
        return []
    listed = np.argsort(-calls, kind="stable")[:c.EVIDENCE_LISTED]  # Counter.most_common's order
    each = {n: c.per_fwd(n, a) for n in set(calls[listed].tolist())}  # a few distinct counts (each name's: 1)
    per = {gpu.names[k // 2]: each[n] for k, n in zip(keys[listed].tolist(), calls[listed].tolist(), strict=True)}
    runtime, driver = (c.per_fwd(int(calls[keys % 2 == api].sum()), a) for api in (0, 1))
    kernels = {k: c.per_fwd(n, a) for k, n in driver_kernels.most_common(5)}
    evidence = {"per_forward": per, "runtime_per_forward": runtime, "driver_per_forward": driver,
                "driver_kernels": kernels, "driver_launches_with_cupti_occupancy_0": c.per_fwd(zeros, a)}
    shown = {n: count(n) for n in set(per.values())}
    names = ", ".join(f"{shown[n]} {name}" for name, n in per.items())
    if len(keys) > len(listed):
        rest = evidence["per_forward_not_listed"] = c.not_listed(len(keys) - len(listed),
                                                                 int(calls.sum() - calls[listed].sum()), None, a)
        names += f", {count(rest['distinct'])} more API names ({count(rest['per_forward'])} launches): not listed"
    each = c.per_unit(a, facts)
    message = f"launches {each}: {count(runtime)} runtime, {count(driver)} driver API ({names})"
    if driver:
        message += (f"; driver-API kernels: {', '.join(kernels)}; CUPTI's achieved occupancy reads 0 for "
                    f"{count(c.per_fwd(zeros, a))} of their launches {each} (see occupancy)")
    return [c.finding("launch-api", "info", message, evidence, None, 0.0)]


def _launches(gpu: GpuColumns) -> tuple[np.ndarray, np.ndarray, Counter, int]:
    """(each API call launched, as its name's code * 2 + 1 for the driver API, 0 for the runtime, and how many
    launches it made, first seen first as a walk over the activities would; driver-API launches by kernel
    short name; how many of those CUPTI gives a 0 occupancy estimate)."""
    launched = np.flatnonzero(gpu.launch_name >= 0)
    keys, calls = _first_seen_counts(gpu.launch_name[launched].astype(np.int64) * 2 + gpu.launch_driver[launched])
    driver = np.flatnonzero(gpu.launch_driver)
    kernels: Counter = Counter()
    short_name = kn.short_name.__wrapped__  # uncached: its cache would keep a str and a name per kernel named
    codes, launches = (x.tolist() for x in _first_seen_counts(gpu.name[driver]))
    for name, n in zip(made_afresh(gpu.names, codes), launches, strict=True):
        kernels[short_name(name)] += n
    zero = np.array([x is not None and x.est_occupancy_pct == 0 for x in gpu.arg_sets], np.bool_)
    return keys, calls, kernels, int(np.count_nonzero(zero[gpu.args[driver]]))


def _first_seen_counts(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each distinct key and how many times it comes, in the order the keys first come: one sort for
    all, not a Python step per group (a trace of unique names launches through 30k+ distinct API names)."""
    distinct, first, counts = np.unique(keys, return_index=True, return_counts=True)
    order = np.argsort(first, kind="stable")
    return distinct[order], counts[order]


RULE = c.Rule("launch-api", scope="forward", waste=False, check=check)
