"""launch-api: GPU work launched through the CUDA runtime vs the driver API, per forward.

PyTorch's own kernels go through the runtime (`cudaLaunchKernel`, `cudaLaunchKernelExC`,
`cudaMemcpyAsync`, `cudaMemsetAsync`); cuBLAS's nvjet GEMMs, cuDNN and Triton launch with the
driver API (`cuLaunchKernel`, `cuLaunchKernelEx`). It matters for reading a trace: CUPTI's
occupancy estimate is 0 for driver-API launches, and the launch events sit in a different
category (`cuda_driver`).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from attnprof.analysis.activities import GpuColumns
from attnprof.analysis.attribution import Analysis
from attnprof.findings import _common as c
from attnprof.gpu import kernel_names as kn
from attnprof.units import count


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    if not a.has_gpu:
        return []
    calls, driver_kernels, zeros = _launches(c.all_gpu(a))
    if not calls:
        return []
    each = {n: c.per_fwd(n, a) for n in set(calls.values())}  # a few distinct counts (each name's: 1)
    per = {name: each[n] for (_, name), n in calls.most_common()}
    runtime = c.per_fwd(sum(n for (api, _), n in calls.items() if api == "runtime"), a)
    driver = c.per_fwd(sum(n for (api, _), n in calls.items() if api == "driver"), a)
    kernels = {k: c.per_fwd(n, a) for k, n in driver_kernels.most_common(5)}
    evidence = {"per_forward": per, "runtime_per_forward": runtime, "driver_per_forward": driver,
                "driver_kernels": kernels, "driver_launches_with_cupti_occupancy_0": c.per_fwd(zeros, a)}
    shown = {n: count(n) for n in set(per.values())}
    names = ", ".join(f"{shown[n]} {name}" for name, n in per.items())
    each = c.per_unit(a, facts)
    message = f"launches {each}: {count(runtime)} runtime, {count(driver)} driver API ({names})"
    if driver:
        message += (f"; driver-API kernels: {', '.join(kernels)}; CUPTI's achieved occupancy reads 0 for "
                    f"{count(c.per_fwd(zeros, a))} of their launches {each} (see occupancy)")
    return [c.finding("launch-api", "info", message, evidence, None, 0.0)]


def _launches(gpu: GpuColumns) -> tuple[Counter, Counter, int]:
    """(launches by (runtime | driver, API call), driver-API launches by kernel short name, how many of those
    CUPTI gives a 0 occupancy estimate), counted first seen first as a walk over the activities would."""
    launched = np.flatnonzero(gpu.launch_name >= 0)
    keys, counts = _first_seen_counts(gpu.launch_name[launched] * 2 + gpu.launch_driver[launched])
    apis = [("runtime", "driver")[k % 2] for k in keys]
    names = list(map(gpu.names.__getitem__, [k // 2 for k in keys]))
    calls = Counter(dict(zip(zip(apis, names, strict=True), counts, strict=True)))  # each key: one name and API
    driver = np.flatnonzero(gpu.launch_driver)
    kernels: Counter = Counter()
    for code, n in zip(*_first_seen_counts(gpu.name[driver]), strict=True):
        kernels[kn.short_name(gpu.names[code])] += n
    zero = np.array([x is not None and x.est_occupancy_pct == 0 for x in gpu.arg_sets], np.bool_)
    return calls, kernels, int(np.count_nonzero(zero[gpu.args[driver]]))


def _first_seen_counts(keys: np.ndarray) -> tuple[list[int], list[int]]:
    """Each distinct key and how many times it comes, as ints, in the order the keys first come: one sort for
    all, not a Python step per group (a trace of unique names launches through 30k+ distinct API names)."""
    distinct, first, counts = np.unique(keys, return_index=True, return_counts=True)
    order = np.argsort(first, kind="stable")
    return distinct[order].tolist(), counts[order].tolist()


RULE = c.Rule("launch-api", scope="forward", waste=False, check=check)
