"""Timing and memory of one forward, done right (and before any profiler runs in the process).

Three numbers that users mix up, kept apart:
- device time: how long the GPU is busy per call. Measured by CUDA-graph replay (no launch
  gaps), else by back-to-back calls between one pair of CUDA events; a host-bound forward timed
  back to back measures the host, so the runner adds the GPU's busy time from the trace beside it.
- latency: one call between its own pair of events after a sync, so it includes the GPU
  waiting while the host issues the call. For fused kernels at small shapes this is host time.
- host time: what the CPU spends issuing one call (perf_counter around the call).

Repeat counts are adaptive, after torch.utils.benchmark's blocked_autorange: calls are timed in
blocks long enough that the timer's own cost vanishes, blocks are taken until there are at least
`repeats` of them and `min_time_s` of timed work, and then on (up to MAX_TIME_FACTOR times that)
while their spread stays wide, as its adaptive_autorange does. Every spread carries a verdict
(analysis.noise): a measurement that drifted, split in two or stayed wide is marked `unstable`.
On the CPU the thread count is set for the run and recorded (torch.utils.benchmark times with one
thread by default: on a small machine the intra-op pool competes with everything else).

Warm-up and the first call (where torch.compile compiles) never enter these numbers; the runner
records the first call's seconds separately. Repeated calls on the same inputs find them in L2;
`RotatingCall` cycles through copies so each call reads inputs that are not cache-resident.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from attnprof.analysis.noise import Spread, is_wide

MIN_TIME_S = 0.1  # timed work per measurement, at least
MAX_TIME_FACTOR = 10  # a wide spread keeps the loop going up to this many times MIN_TIME_S
BLOCK_US = {"cuda": 2000.0, "cpu": 1000.0}  # a block this long makes event and timer cost negligible
MAX_CALLS_PER_BLOCK = 200


@dataclass(frozen=True)
class Timing:
    device_us: Spread
    device_method: str  # cuda-graph | back-to-back | cpu-wall
    latency_us: Spread
    host_us: float
    peak_memory_bytes: int | None
    threads: int | None = None  # torch's intra-op threads while timing
    graph_refused: str | None = None  # why a CUDA graph could not capture the call (then it ran back to back)

    @property
    def cpu_bound(self) -> bool | None:
        """True when issuing a call takes the host longer than the device needs to run it. Known
        only from graph replay: back-to-back time of a host-bound forward is host time, so the
        runner decides from the GPU's busy time in the trace instead. None on the CPU."""
        if self.device_method != "cuda-graph":
            return None
        return self.host_us > self.device_us.median


class RotatingCall:
    """Call `forward` on `sets` copies of its inputs in turn, so that with enough copies to
    exceed L2 each call reads inputs from memory, as a call inside a model would."""

    def __init__(self, forward: Callable[..., object], args: Sequence, sets: int = 1):
        copies = [tuple(args)] + [tuple(t.clone() for t in args) for _ in range(max(sets, 1) - 1)]
        self.sets = len(copies)
        self._turn = itertools.cycle(copies)
        self._forward = forward

    def __call__(self) -> object:
        return self._forward(*next(self._turn))


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[int]:
    """Run with `n` intra-op threads (None: leave torch's choice); yields the count in use."""
    import torch

    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def calls_per_block(estimate_us: float, device: str, multiple_of: int = 1) -> int:
    """Calls per timed block: enough that timer resolution and launch jitter stay small."""
    n = max(1, min(MAX_CALLS_PER_BLOCK, int(BLOCK_US[device] / max(estimate_us, 1.0))))
    return -(-n // multiple_of) * multiple_of


def block_us(fn: Callable[[], object], calls: int, device: str) -> float:
    """µs for `calls` back-to-back calls: between one pair of CUDA events after a sync on a GPU,
    wall clock on the CPU. The one timer of back-to-back work (the roofline's ceilings use it too)."""
    if device != "cuda":
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t0) * 1e6
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3


def autorange(time_block: Callable[[], float], calls: int, repeats: int,
              min_time_s: float = MIN_TIME_S) -> list[float]:
    """µs per call of successive blocks of `calls` calls (`time_block()` returns a block's µs)."""
    samples, spent = [], 0.0
    while True:
        total = time_block()
        samples.append(total / calls)
        spent += total * 1e-6
        if len(samples) >= repeats and spent >= min_time_s and (
                spent >= MAX_TIME_FACTOR * min_time_s or not is_wide(samples)):
            return samples


def time_blocks(fn: Callable[[], object], device: str, repeats: int, min_time_s: float = MIN_TIME_S,
                multiple_of: int = 1) -> list[float]:
    """Per-call µs of back-to-back blocks, the block size from a first call's time."""
    estimate = block_us(fn, 1, device)
    calls = calls_per_block(estimate, device, multiple_of)
    return autorange(lambda: block_us(fn, calls, device), calls, repeats, min_time_s)


def time_cpu(fn: Callable[[], object], repeats: int, min_time_s: float = MIN_TIME_S) -> Timing:
    import torch

    spread = Spread.of(time_blocks(fn, "cpu", repeats, min_time_s))
    # on the CPU the host does the work: device time, latency and host time are one number
    return Timing(spread, "cpu-wall", spread, spread.median, None, torch.get_num_threads())


def time_cuda(fn: Callable[[], object], repeats: int, use_graph: bool = True,
              min_time_s: float = MIN_TIME_S) -> Timing:
    import torch

    latency, host = _latency_and_host(fn, repeats)
    peak = _extra_peak_memory(fn)  # before any graph capture holds a private memory pool
    sets = fn.sets if isinstance(fn, RotatingCall) else 1
    calls = calls_per_block(statistics.median(latency), "cuda", sets)  # every copy in every block
    replay, refused = _captured(fn, calls) if use_graph else (None, None)
    if replay is not None:
        device, method = autorange(replay, calls, repeats, min_time_s), "cuda-graph"
        del replay  # frees the graph and its memory pool
    else:
        device, method = autorange(lambda: block_us(fn, calls, "cuda"), calls, repeats, min_time_s), "back-to-back"
    torch.cuda.synchronize()
    return Timing(Spread.of(device), method, Spread.of(latency), round(statistics.median(host), 3), peak,
                  torch.get_num_threads(), refused)


def _latency_and_host(fn, repeats: int) -> tuple[list[float], list[float]]:
    import torch

    latency, host = [], []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e6)
        end.record()
        end.synchronize()
        latency.append(start.elapsed_time(end) * 1e3)
    return latency, host


def _captured(fn, calls: int) -> tuple[Callable[[], float] | None, str | None]:
    """(a timer of one replay of a captured graph of `calls` calls (µs), None), or (None, why capture was
    refused: the exception's type and first line, e.g. torch's own when a kept autograd graph's nodes sit
    on another stream)."""
    import torch

    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up on a side stream, as capture requires
            fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    except Exception as e:  # noqa: BLE001 - any capture failure means: time it back to back instead
        torch.cuda.synchronize()
        return None, f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"
    graph.replay()  # the first replay uploads the graph; keep it out of the numbers
    return lambda: block_us(graph.replay, 1, "cuda"), None


def _extra_peak_memory(fn) -> int:
    """Bytes the call allocates above what was live before it (its output included)."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return int(peak)


def note_pin_overhead(records: list[dict]) -> None:
    """Where sdpa-auto ran the backend a pinned variant pins, the same kernel ran both ways, so
    the difference in host time is what `with sdpa_kernel(...)` costs per call (~40 µs on an H200).
    Needs the backend sdpa-auto ran (from its trace) and host time measured apart from device time."""
    by_name = {r["name"]: r for r in records if r.get("status") == "ok"}
    auto = by_name.get("sdpa-auto")
    if not auto or not auto.get("backend") or (auto.get("device_us") or {}).get("method") == "cpu-wall":
        return
    pinned = by_name.get(f"sdpa-{auto['backend']}")
    if pinned and pinned.get("host_us") is not None and auto.get("host_us") is not None:
        pinned["pin_overhead_us"] = round(pinned["host_us"] - auto["host_us"], 1)


def load_average() -> float | None:
    """The machine's 1-minute load average (runnable processes), None where the OS has none: above the
    core count while timing, other work shared the CPU and times read slower and wider."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None
