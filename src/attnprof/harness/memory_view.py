"""One more call of a variant under `profile_memory=True`, apart from the profiled forwards (whose host
times it would distort): its memory peak above what the call starts with, and the ops holding it then
(analysis.memory_peak), on the CPU and on a GPU alike."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

from attnprof.analysis.memory_peak import peak

REGION = "attnprof.memory"


def memory_view(call: Callable[[], object], device: str) -> dict | None:
    """`analysis.memory_peak.peak` of one call of `call` on `device`; None when the profiler recorded no
    allocation in it."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from attnprof.harness.quiet import quiet_stderr

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with quiet_stderr(), profile(activities=activities, profile_memory=True) as prof:
        with record_function(REGION):
            call()
        if device == "cuda":
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory(prefix="attnprof-memory-") as folder:
        path = Path(folder) / "memory.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents") or []
    return peak(events, REGION, device)
