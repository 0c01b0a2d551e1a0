"""Timing and memory of one forward, done right (and before any profiler runs in the process).

Three numbers that users mix up, kept apart:
- device time: how long the GPU is busy per call. Measured by CUDA-graph replay (no launch
  gaps), else by back-to-back calls between one pair of CUDA events.
- latency: one call between its own pair of events after a sync, so it includes the GPU
  waiting while the host issues the call. For fused kernels at small shapes this is host time.
- host time: what the CPU spends issuing one call (perf_counter around the call).

Warm-up and the first call (where torch.compile compiles) never enter these numbers; the runner
records the first call's seconds separately. Repeated calls on the same inputs find them in L2;
`rotating_call` cycles through copies so each call reads inputs that are not cache-resident.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Spread:
    median: float
    p25: float
    p75: float

    @classmethod
    def of(cls, samples: list[float]) -> Spread:
        if len(samples) == 1:
            return cls(samples[0], samples[0], samples[0])
        q = statistics.quantiles(samples, n=4, method="inclusive")
        return cls(round(statistics.median(samples), 3), round(q[0], 3), round(q[2], 3))

    def as_dict(self) -> dict:
        return {"median": self.median, "p25": self.p25, "p75": self.p75}


@dataclass(frozen=True)
class Timing:
    device_us: Spread
    device_method: str  # cuda-graph | back-to-back | cpu-wall
    latency_us: Spread
    host_us: float
    peak_memory_bytes: int | None

    @property
    def cpu_bound(self) -> bool | None:
        """True when issuing a call takes the host longer than the device needs to run it: then
        latency measures the host, and only graph replay or batching shows the kernels' speed.
        None on the CPU, where the host does the work."""
        if self.device_method == "cpu-wall":
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


def calls_per_repeat(estimate_us: float, target_us: float = 2000.0) -> int:
    """Enough calls per timed repeat that event resolution and launch jitter stay small."""
    return max(1, min(200, int(target_us / max(estimate_us, 1.0))))


def time_cpu(fn: Callable[[], object], repeats: int) -> Timing:
    per_call = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        per_call.append((time.perf_counter() - t0) * 1e6)
    spread = Spread.of(per_call)
    # on the CPU the host does the work: device time, latency and host time are one number
    return Timing(spread, "cpu-wall", spread, spread.median, None)


def time_cuda(fn: Callable[[], object], repeats: int, use_graph: bool = True) -> Timing:
    import torch

    latency, host = _latency_and_host(fn, repeats)
    peak = _extra_peak_memory(fn)  # before any graph capture holds a private memory pool
    sets = fn.sets if isinstance(fn, RotatingCall) else 1
    n = -(-calls_per_repeat(statistics.median(latency)) // sets) * sets  # every copy in every repeat
    device, method = None, "back-to-back"
    if use_graph:
        device = _graph_replay(fn, n, repeats)
        method = "cuda-graph" if device else method
    if device is None:
        device = _back_to_back(fn, n, repeats)
    torch.cuda.synchronize()
    return Timing(Spread.of(device), method, Spread.of(latency), round(statistics.median(host), 3), peak)


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


def _back_to_back(fn, n: int, repeats: int) -> list[float]:
    import torch

    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(n):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / n)
    return samples


def _graph_replay(fn, n: int, repeats: int) -> list[float] | None:
    """Device time from replaying a captured graph of n calls; None where capture is refused."""
    import torch

    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up on a side stream, as capture requires
            fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(n):
                fn()
    except Exception:  # noqa: BLE001 - any capture failure means: time it back to back instead
        torch.cuda.synchronize()
        return None
    graph.replay()  # the first replay uploads the graph; keep it out of the numbers
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / n)
    del graph
    return samples


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
