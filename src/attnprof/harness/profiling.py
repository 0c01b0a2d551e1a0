"""The article's profiling harness around one forward: torch.profiler with a schedule,
each forward inside record_function(<region>), a Chrome trace and a key_averages table."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from attnprof.harness import defaults


def profile_call(
    call: Callable[[], object], trace_path: Path, device: str, region: str = defaults.REGION,
    schedule: tuple[int, int, int] = defaults.SCHEDULE, record_shapes: bool = False,
) -> str:
    """Profile `call` for wait+warmup+active steps; write the trace, return the table text.

    record_shapes (unless asked: lint wants tensor sizes, not host time), profile_memory and
    with_stack stay off: their overhead distorts host time.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function
    from torch.profiler import schedule as make_schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    wait, warmup, active = schedule
    with profile(activities=activities, record_shapes=record_shapes,
                 schedule=make_schedule(wait=wait, warmup=warmup, active=active, repeat=1)) as prof:
        for _ in range(wait + warmup + active):
            with record_function(region):
                call()
            prof.step()
    if device == "cuda":
        torch.cuda.synchronize()
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = trace_path.with_name(f".{trace_path.name}.tmp.json.gz")  # torch gzips by suffix
    prof.export_chrome_trace(str(tmp))
    tmp.replace(trace_path)
    return key_averages_table(prof, device)


def key_averages_table(prof, device: str, rows: int = 40) -> str:
    averages = prof.key_averages()
    keys = ("device_time_total", "cuda_time_total") if device == "cuda" else ("cpu_time_total",)
    for key in keys:  # the name of the device-time column changed across torch releases
        try:
            return averages.table(sort_by=key, row_limit=rows)
        except (KeyError, AttributeError, ValueError):
            continue
    return averages.table(row_limit=rows)
