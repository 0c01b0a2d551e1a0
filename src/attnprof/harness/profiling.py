"""The one torch.profiler block (`profiler`), and the article's harness on it (`profile_call`): a
schedule, each forward inside record_function(<region>), a Chrome trace and a key_averages table.
Every stage that profiles (run, sweep, lint, patch --verify, expect) goes through `profiler`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from attnprof.options import REGION, SCHEDULE


@contextmanager
def profiler(cuda: bool, *, schedule: tuple[int, int, int] | None = None, record_shapes: bool = False,
             with_stack: bool = False) -> Iterator:
    """torch.profiler over the block, CPU and (when `cuda`) CUDA activities; the GPU is synchronized
    before the profiler stops, so that every launched kernel is in the trace. torch's own noise on
    stderr (kineto's USDT lines, the "clears events" warning) is kept from the user (harness.quiet)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler import schedule as make_schedule

    from attnprof.harness.quiet import quiet_stderr

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    steps = {} if schedule is None else {"schedule": make_schedule(
        wait=schedule[0], warmup=schedule[1], active=schedule[2], repeat=1)}
    with quiet_stderr(), profile(activities=activities, record_shapes=record_shapes, with_stack=with_stack,
                                 **steps) as prof:
        yield prof
        if cuda:
            torch.cuda.synchronize()


def export_trace(prof, trace_path: Path) -> None:
    """The Chrome trace, gzipped (torch picks by suffix), written under a temporary name then renamed."""
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = trace_path.with_name(f".{trace_path.name}.tmp.json.gz")
    prof.export_chrome_trace(str(tmp))
    tmp.replace(trace_path)


def profile_call(
    call: Callable[[], object], trace_path: Path, device: str, region: str = REGION,
    schedule: tuple[int, int, int] = SCHEDULE, record_shapes: bool = False,
) -> str:
    """Profile `call` for wait+warmup+active steps; write the trace, return the table text.

    record_shapes (unless asked: lint wants tensor sizes, not host time), profile_memory and
    with_stack stay off: their overhead distorts host time.
    """
    from torch.profiler import record_function

    with profiler(device == "cuda", schedule=schedule, record_shapes=record_shapes) as prof:
        for _ in range(sum(schedule)):
            with record_function(region):
                call()
            prof.step()
    export_trace(prof, trace_path)
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
