"""SYNTHETIC rank traces for the multi-rank analysis tests: Kineto-shaped JSON written by hand, with
kernel intervals chosen so that every figure (comm, exposed comm, overlap, merge) is known exactly.
The traces recorded on GPUs are under fixtures/h200_cp2; these only pin the arithmetic.

One step of rank r (times in µs from the step's start; the GPU is device r):
    attention  flash_fwd_kernel              [100, 400]
    NCCL       ncclDevKernel_SendRecv        [150, 500]  (another stream: 250 under attention, 100 exposed)
    merge      CatArrayBatchedCopy           [500, 550]
    NCCL       ncclDevKernel_AllGather_RING  [540, 600]  (10 under the merge, 50 exposed)
    attention  flash_fwd_kernel              [600, 800 + extra[r]]
so comm = 410, exposed = 150, overlap = 1 - 150/410, compute = 550 + extra, attention = 500 + extra.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

BASE_NS = 1_790_857_026_000_000_000  # what Kineto writes as baseTimeNanoseconds
STEP_US = 2000.0
KERNELS = (("flash_fwd_kernel", 7, 100, 400),
           ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 20, 150, 500),
           ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float>(...)", 7, 500, 550),
           ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 20, 540, 600),
           ("flash_fwd_kernel", 7, 600, 800))
COMM_US, EXPOSED_US, COMPUTE_US, ATTENTION_US, MERGE_US = 410.0, 150.0, 550.0, 500.0, 50.0


def rank_trace(rank: int, world: int, steps: int = 3, extra_us: float = 0.0, shift_us: float = 0.0,
               info: bool = True) -> dict:
    """One rank's trace: `steps` ProfilerStep regions, each the step above (last kernel `extra_us` longer)."""
    events, corr = [], 1000 * rank
    for s in range(steps):
        t0 = 10_000.0 + s * STEP_US + shift_us
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s + 2}", "pid": 1, "tid": 1,
                       "ts": t0, "dur": STEP_US - 10})
        for i, (name, stream, start, end) in enumerate(KERNELS):
            corr += 1
            end += extra_us if i == len(KERNELS) - 1 else 0.0
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": t0 + 5 + 10 * i, "dur": 4, "args": {"correlation": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": rank, "tid": stream,
                           "ts": t0 + start, "dur": end - start,
                           "args": {"correlation": corr, "device": rank, "stream": stream}})
    doc = {"schemaVersion": 1, "baseTimeNanoseconds": BASE_NS, "traceEvents": events}
    if info:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
    return doc


def write_ranks(folder: Path, world: int, extra_us: tuple[float, ...] = (), **kw) -> list[Path]:
    """`world` rank traces (gzip) in `folder`; rank r's last attention kernel is extra_us[r] longer."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in range(world):
        path = folder / f"synthetic_rank{r}.json.gz"
        extra = extra_us[r] if r < len(extra_us) else 0.0
        path.write_bytes(gzip.compress(json.dumps(rank_trace(r, world, extra_us=extra, **kw)).encode()))
        paths.append(path)
    return paths
