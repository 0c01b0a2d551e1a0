"""Roofline per variant: the problem's useful FLOPs and least bytes, the rates a variant reached
(from its device-time median), and those rates as a share of ceilings measured on this device at
run time: a large matmul (FLOP/s) and a large device copy (bytes read + written per second).
Never datasheet values: a datasheet says what the silicon could do, the measurement what this
device, clock, driver and torch build do.

FLOPs are the useful work of causal attention, Problem.flops() (4*B*H*S^2*D, halved), for every
variant, so variants are rated on the same work. torch.utils.flop_counter.FlopCounterMode counts
what the matmuls execute instead: the full S^2 for naive (it computes the masked half too) and for
SDPA's fused CUDA ops (their formulas ignore is_causal), and nothing for the CPU flash op.

Ceilings are cached per device (name, torch version and, on CPU, threads) in
$XDG_CACHE_HOME/attnprof/ceilings.json (default ~/.cache); delete the file to measure again.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from attnprof.files import write_json_atomic
from attnprof.problem import DTYPES

# a kernel may compute in fp32 whatever its inputs (SDPA math upcasts; so do CPUs without bf16
# units), so the matmul ceiling is the faster of the problem's dtype and fp32
ALSO_FP32 = "fp32"
MATMUL_MAX_N = {"cuda": 8192, "cpu": 1024}
COPY_BYTES = {"cuda": 1 << 30, "cpu": 64 << 20}  # far beyond any cache, small enough for 2 cores
GROW_UNTIL_S = 0.01  # a matmul grows until one call takes this long (bf16 on CPUs is ~50x slower)
CALLS_REPEATS = {"cuda": (5, 5), "cpu": (1, 3)}  # calls per timed repeat, repeats (best one kept)


def cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "attnprof" / "ceilings.json"


def device_key(info: dict) -> str:
    parts = [info["type"], str(info.get("name")), f"torch {info['torch']}"]
    if info.get("threads"):
        parts.append(f"{info['threads']} threads")
    return " | ".join(parts)


def ceilings(info: dict, dtype: str) -> dict:
    """The device's matmul TFLOP/s (best of `dtype` and fp32) and copy TB/s, measured once."""
    import json

    path, key = cache_path(), device_key(info)
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        cache = {}
    entry = cache.get(key) or {"matmul_tflops": {}, "matmul_n": {}}
    wanted = list(dict.fromkeys((dtype, ALSO_FP32)))
    if any(d not in entry["matmul_tflops"] for d in wanted) or "copy_tbps" not in entry:
        _measure_missing(entry, info["type"], wanted)
        cache[key] = entry
        with contextlib.suppress(OSError):  # a read-only home still gets a roofline, measured each time
            write_json_atomic(path, cache)
    best = max(wanted, key=lambda d: entry["matmul_tflops"][d])
    return {"device_key": key, "matmul_tflops": entry["matmul_tflops"][best], "matmul_dtype": best,
            "copy_tbps": entry["copy_tbps"], "measured": entry, "cache": str(path)}


def _measure_missing(entry: dict, device: str, dtypes: list[str]) -> None:
    for d in dtypes:
        if d not in entry["matmul_tflops"]:
            entry["matmul_tflops"][d], entry["matmul_n"][d] = measure_matmul(device, d)
    if "copy_tbps" not in entry:
        entry["copy_tbps"], entry["copy_bytes"] = measure_copy(device)


def measure_matmul(device: str, dtype: str) -> tuple[float, int]:
    """TFLOP/s of an n x n x n matmul, n doubled from 256 until a call is long enough or n is large."""
    import torch

    n = 256
    while True:
        a, b = (torch.randn(n, n, device=device, dtype=getattr(torch, DTYPES[dtype])) for _ in range(2))
        mm = partial(torch.mm, a, b)
        if n >= MATMUL_MAX_N[device] or _best_seconds(mm, device, 1, 1) >= GROW_UNTIL_S:
            break
        n *= 2
    seconds = _best_seconds(mm, device, *CALLS_REPEATS[device])
    return _sig(2 * n**3 / seconds / 1e12), n


def measure_copy(device: str) -> tuple[float, int]:
    """TB/s of one large device-to-device copy, counting the bytes read and the bytes written."""
    import torch

    size = COPY_BYTES[device]
    if device == "cuda":
        size = min(size, torch.cuda.mem_get_info()[0] // 4)  # two buffers, room to spare
    src = torch.empty(size // 4, device=device, dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    seconds = _best_seconds(lambda: dst.copy_(src), device, *CALLS_REPEATS[device])
    return _sig(2 * src.numel() * 4 / seconds / 1e12), src.numel() * 4


def _best_seconds(fn: Callable[[], object], device: str, calls: int, repeats: int) -> float:
    """Seconds per call, the best repeat: a ceiling is what the device can reach, not its average."""
    import torch

    fn()  # the first call picks kernels and allocates; never timed
    best = math.inf
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            seconds = time.perf_counter() - t0
        best = min(best, seconds / calls)
    return best


def roofline(problem: dict, device_us: float, ceiling: dict | None) -> dict:
    """Achieved rates of one variant and their share of the measured ceilings.

    `bound` is the roof the problem sits under: its intensity at the least bytes against the
    ridge point (matmul FLOP/s / copy bytes/s). A variant moving more bytes (naive writes the
    S x S scores) sits lower under the same roof, which the percentages show."""
    seconds = device_us * 1e-6
    flops, nbytes = problem["flops"], problem["min_bytes"]
    tflops, tbps = flops / seconds / 1e12, nbytes / seconds / 1e12
    out = {"flops": flops, "bytes": nbytes, "intensity": _sig(flops / nbytes), "tflops": _sig(tflops),
           "tbps": _sig(tbps), "pct_of_matmul": None, "pct_of_copy": None, "bound": None}
    if ceiling:
        ridge = ceiling["matmul_tflops"] / ceiling["copy_tbps"]  # FLOP per byte where the roofs meet
        out |= {"pct_of_matmul": round(100 * tflops / ceiling["matmul_tflops"], 1),
                "pct_of_copy": round(100 * tbps / ceiling["copy_tbps"], 1),
                "bound": "compute" if flops / nbytes >= ridge else "memory"}
    return out


def add_roofline(results: dict) -> None:
    """Add `ceilings` to the results and a `roofline` to every variant (None where it did not run).
    A failed ceiling measurement leaves the rates without percentages; it never fails the run."""
    # a user's target computes its own problem, not the attention problem's FLOPs: no rate for it
    timed = [v for v in results["variants"]
             if v["status"] == "ok" and v.get("device_us") and v.get("family") != "target"]
    for v in results["variants"]:
        v["roofline"] = None
    if not timed:
        return  # nothing to rate: spare the device the measurement
    try:
        ceiling = ceilings(results["device"], results["problem"]["dtype"])
    except Exception as e:  # noqa: BLE001 - e.g. out of memory next to the variants' buffers
        ceiling = None
        results["ceilings"] = {"error": f"{type(e).__name__}: {' '.join(str(e).split())}"[:300]}
    else:
        results["ceilings"] = ceiling
    for v in timed:
        v["roofline"] = roofline(results["problem"], v["device_us"]["median"], ceiling)


def _sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")
