"""cpu-bound: the host needs about as long to issue a forward as the GPU needs to run it.

When host time per forward is close to or above GPU time, launch overhead sets the pace: the
GPU idles between kernels waiting for the next launch, and faster kernels change nothing. The
evidence is host time (the forward's `record_function` range) against GPU busy time, the time
spent in launch calls, and the ops with the largest CPU self time (duration minus that of the
ops nested directly inside, from the trace's nesting). Host time measured under the profiler
includes its per-op overhead, so the gap is an upper bound.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from functools import reduce
from operator import add

from attnprof.analysis.attribution import Analysis
from attnprof.findings import _common as c
from attnprof.units import count, us

CLOSE = 0.8  # host >= 80% of GPU time: the GPU has little slack left
TOP = 5


def self_times(a: Analysis) -> list[tuple[str, float]]:
    """CPU self time per op name, per forward, largest first."""
    total: dict[str, float] = defaultdict(float)
    for fwd in a.forwards:
        own = c.op_tree(a, fwd).self_times().__getitem__
        for name, at in fwd.name_positions.items():  # per name, in cpu_ops order: the same sums as op by op
            total[name] = reduce(add, map(own, at), total[name])
    return sorted(((name, c.per_fwd(t, a)) for name, t in total.items()), key=lambda kv: -kv[1])


def check(a: Analysis) -> list[dict]:
    if not a.has_gpu or not a.forwards:
        return []
    host = statistics.median(f.region.dur for f in a.forwards)
    gpu = statistics.median(f.gpu_time_us for f in a.forwards)
    if gpu <= 0 or host < CLOSE * gpu:
        return []
    launches = [act.launch for f in a.forwards for act in f.activities if act.launch is not None]
    top = self_times(a)[:TOP]
    evidence = {"host_time_us_per_forward": round(host, 3), "gpu_time_us_per_forward": round(gpu, 3),
                "host_over_gpu": round(host / gpu, 3), "launches_per_forward": c.per_fwd(len(launches), a),
                "launch_time_us_per_forward": c.per_fwd(sum(e.dur for e in launches), a),
                "top_self_time": [{"op": name, "self_us_per_forward": t} for name, t in top]}
    verb = "exceeds" if host >= gpu else "is close to"
    ops = ", ".join(f"{name} {us(t)}" for name, t in top[:3])
    message = (f"host time per forward ({us(host)}) {verb} GPU time ({us(gpu)}, {host / gpu:.2f}x): "
               f"launch overhead sets the pace; {count(evidence['launches_per_forward'])} launches take "
               f"{us(evidence['launch_time_us_per_forward'])}; largest CPU self time: {ops}")
    fix = ("issue less host work per forward: capture it in a CUDA graph (torch.cuda.graphs, or "
           "torch.compile(mode='reduce-overhead')), use fused kernels (fewer launches), or give each call "
           "more work; time it outside the profiler, which adds host overhead per op")
    return [c.finding("cpu-bound", "warn" if host >= gpu else "info", message, evidence, fix, host - gpu)]


RULE = c.Rule("cpu-bound", scope="forward", waste=False, check=check)
