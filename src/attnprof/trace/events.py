"""The events of a trace as the analysis reads them: `Event`, one complete ('X') event, and `Args`, the
arguments attnprof reads (msgspec skips the others while decoding). Imports no torch.

The reader keeps no `Event` per event: it keeps columns (trace/columns.py) and makes an `Event` from a
row when asked. Those of one row are equal, not identical: compare rows, not objects, across calls.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
# ROCm's roctracer writes its hip* calls under the first two too; Kineto's Intel XPU and out-of-tree backends
# (PrivateUse1) write theirs under their own names, with the same correlation ids
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver", "xpu_runtime", "privateuse1_runtime", "privateuse1_driver")
# Kineto's 2021-2022 schema named the categories otherwise (its record_function ranges, ProfilerStep#N
# among them, are `Operator` events): read as today's names, so that one model serves both
CATEGORY_ALIASES = {"Operator": "cpu_op", "Runtime": "cuda_runtime", "Driver": "cuda_driver", "Kernel": "kernel",
                    "Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}
# the correlation column is int64, -1 for none: an id beyond int64 is a malformed field (dropped, event kept)
Correlation = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class Args(msgspec.Struct, gc=False, omit_defaults=True):
    """The args attnprof reads (msgspec skips the others while decoding); events share equal ones."""

    correlation: Correlation | None = None
    registers_per_thread: int | None = msgspec.field(default=None, name="registers per thread")
    shared_memory: int | None = msgspec.field(default=None, name="shared memory")
    blocks_per_sm: float | None = msgspec.field(default=None, name="blocks per SM")
    warps_per_sm: float | None = msgspec.field(default=None, name="warps per SM")
    grid: list[int] | None = None
    block: list[int] | None = None
    est_occupancy_pct: float | None = msgspec.field(default=None, name="est. achieved occupancy %")
    bytes: int | None = None
    input_dims: list[Any] | None = msgspec.field(default=None, name="Input Dims")
    input_type: list[Any] | None = msgspec.field(default=None, name="Input type")
    device: int | None = None
    stream: int | None = None


class Event(msgspec.Struct, gc=False):
    """One complete ('X') event. Times are microseconds, as torch.profiler writes them.

    Loaded events share equal strings and list arguments: treat them as read-only.
    """

    name: str = ""
    cat: str = ""
    ph: str = ""
    ts: float = 0.0
    dur: float = 0.0
    pid: int | str = 0
    tid: int | str = 0
    args: Args | None = None

    @property
    def end(self) -> float:
        return self.ts + self.dur
