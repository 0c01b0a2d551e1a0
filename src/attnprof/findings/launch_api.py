"""launch-api: GPU work launched through the CUDA runtime vs the driver API, per forward.

PyTorch's own kernels go through the runtime (`cudaLaunchKernel`, `cudaLaunchKernelExC`,
`cudaMemcpyAsync`, `cudaMemsetAsync`); cuBLAS's nvjet GEMMs, cuDNN and Triton launch with the
driver API (`cuLaunchKernel`, `cuLaunchKernelEx`). It matters for reading a trace: CUPTI's
occupancy estimate is 0 for driver-API launches, and the launch events sit in a different
category (`cuda_driver`).
"""

from __future__ import annotations

from collections import Counter

from attnprof.analysis.attribution import Analysis
from attnprof.findings import _common as c
from attnprof.gpu import kernel_names as kn
from attnprof.units import count


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    if not a.has_gpu:
        return []
    calls: Counter = Counter()
    driver_kernels: Counter = Counter()
    zeros = 0
    for fwd in a.forwards:
        for act in fwd.activities:
            if act.launch is None:
                continue
            driver = act.launch.cat == "cuda_driver"
            calls[("driver" if driver else "runtime", act.launch.name)] += 1
            if driver:
                driver_kernels[kn.short_name(act.event.name)] += 1
                zeros += act.event.args is not None and act.event.args.est_occupancy_pct == 0
    if not calls:
        return []
    per = {name: c.per_fwd(n, a) for (_, name), n in calls.most_common()}
    runtime = c.per_fwd(sum(n for (api, _), n in calls.items() if api == "runtime"), a)
    driver = c.per_fwd(sum(n for (api, _), n in calls.items() if api == "driver"), a)
    kernels = {k: c.per_fwd(n, a) for k, n in driver_kernels.most_common(5)}
    evidence = {"per_forward": per, "runtime_per_forward": runtime, "driver_per_forward": driver,
                "driver_kernels": kernels, "driver_launches_with_cupti_occupancy_0": c.per_fwd(zeros, a)}
    names = ", ".join(f"{count(n)} {name}" for name, n in per.items())
    each = c.per_unit(a, facts)
    message = f"launches {each}: {count(runtime)} runtime, {count(driver)} driver API ({names})"
    if driver:
        message += (f"; driver-API kernels: {', '.join(kernels)}; CUPTI's achieved occupancy reads 0 for "
                    f"{count(c.per_fwd(zeros, a))} of their launches {each} (see occupancy)")
    return [c.finding("launch-api", "info", message, evidence, None, 0.0)]


RULE = c.Rule("launch-api", scope="forward", waste=False, check=check)
