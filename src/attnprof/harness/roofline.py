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
$XDG_CACHE_HOME/attnprof/ceilings.json (default ~/.cache), each with its spread and when it was
measured. A ceiling is measured again when its entry is older than MAX_AGE_S or its measurement was
marked unstable (analysis.noise), or on request (`--remeasure-ceilings`). Each measurement is the
fastest block (what the device can reach), timed by measure.block_us, the same back-to-back timer the
variants use. The machine keeps a distribution of them (the last KEPT, none older than KEPT_AGE_S), and
the ceiling a percentage is taken of is the best of the distribution: a measurement made while other
work shared the machine reads low (117 against 216 GFLOP/s on a loaded 2-core machine, one run after
the other), and a percentage of it would move 2x with the load, where the best of the kept ones stays.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from attnprof.analysis.noise import Spread, quartiles
from attnprof.files import write_json_atomic
from attnprof.harness.measure import block_us, time_blocks
from attnprof.problem import DTYPES

# a kernel may compute in fp32 whatever its inputs (SDPA math upcasts; so do CPUs without bf16
# units), so the matmul ceiling is the faster of the problem's dtype and fp32
ALSO_FP32 = "fp32"
MATMUL_MAX_N = {"cuda": 8192, "cpu": 1024}
COPY_BYTES = {"cuda": 1 << 30, "cpu": 64 << 20}  # far beyond any cache, small enough for 2 cores
GROW_UNTIL_S = 0.01  # a matmul grows until one call takes this long (bf16 on CPUs is ~50x slower)
BLOCKS, MIN_TIME_S = 5, {"cuda": 0.2, "cpu": 0.3}  # timed blocks per ceiling, at least, and timed work
MAX_AGE_S = 24 * 3600
KEPT, KEPT_AGE_S = 10, 30 * 24 * 3600  # the distribution of each ceiling kept per machine


def cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "attnprof" / "ceilings.json"


def device_key(info: dict) -> str:
    parts = [info["type"], str(info.get("name")), f"torch {info['torch']}"]
    if info.get("threads"):
        parts.append(f"{info['threads']} threads")
    return " | ".join(parts)


def ceilings(info: dict, dtype: str, remeasure: bool = False) -> dict:
    """The device's matmul TFLOP/s (best of `dtype` and fp32) and copy TB/s: the best of each one's kept
    distribution, with the latest measurement's spread and the distribution's; measured when the cache
    has no fresh and stable entry, or with `remeasure`."""
    import json

    path, key = cache_path(), device_key(info)
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        cache = {}
    entry = cache.get(key) if isinstance(cache.get(key), dict) else {}
    wanted = list(dict.fromkeys((dtype, ALSO_FP32)))
    remeasured = _measure_stale(entry, info["type"], wanted, remeasure)
    if remeasured:
        cache[key] = entry
        with contextlib.suppress(OSError):  # a read-only home still gets a roofline, measured each time
            write_json_atomic(path, cache)
    best = max(wanted, key=lambda d: _best(entry["matmul"][d]))
    used = {"matmul": entry["matmul"][best], "copy": entry["copy"]}
    return {"device_key": key, "matmul_tflops": _best(used["matmul"]), "matmul_dtype": best,
            "matmul_n": used["matmul"]["size"], "copy_tbps": _best(used["copy"]),
            "copy_bytes": used["copy"]["size"], "spread": {k: v["spread"] for k, v in used.items()},
            "distribution": {k: _distribution(v) for k, v in used.items()},
            "unstable": used["matmul"]["spread"].get("unstable") or used["copy"]["spread"].get("unstable"),
            "measured_at": min(v["measured_at"] for v in used.values()), "remeasured": remeasured,
            "cache": str(path)}


def _kept(item: dict) -> list[dict]:
    """A ceiling's kept measurements ({"rate", "measured_at"}), the latest last; an older cache's one."""
    return item.get("kept") or [{"rate": item["rate"], "measured_at": item.get("measured_at", 0)}]


def _best(item: dict) -> float:
    return max(k["rate"] for k in _kept(item))


def _distribution(item: dict) -> dict:
    """The kept measurements' rates: how many, their quartiles and the best (the ceiling used)."""
    rates = [k["rate"] for k in _kept(item)]
    lo, mid, hi = quartiles(rates)
    return {"n": len(rates), "best": max(rates), "median": _sig(mid), "p25": _sig(lo), "p75": _sig(hi),
            "since": min(k["measured_at"] for k in _kept(item))}


def _keep(old: dict | None, new: dict) -> dict:
    """`new` with the distribution kept so far and itself: the last KEPT, none older than KEPT_AGE_S."""
    past = _kept(old) if isinstance(old, dict) and "rate" in old else []
    now = time.time()
    kept = [k for k in past if now - k["measured_at"] <= KEPT_AGE_S]
    return {**new, "kept": [*kept, {"rate": new["rate"], "measured_at": new["measured_at"]}][-KEPT:]}


def _stale(item: dict | None) -> bool:
    if not isinstance(item, dict) or "rate" not in item or "spread" not in item:
        return True  # missing, or written by an older attnprof
    return time.time() - item.get("measured_at", 0) > MAX_AGE_S or bool(item["spread"].get("unstable"))


def _measure_stale(entry: dict, device: str, dtypes: list[str], remeasure: bool = False) -> list[str]:
    """Measure what is missing, old or unstable (everything, with `remeasure`) into `entry`, each new
    measurement added to the kept distribution; returns what was measured."""
    done = []
    entry.setdefault("matmul", {})
    for d in dtypes:
        if remeasure or _stale(entry["matmul"].get(d)):
            entry["matmul"][d] = _keep(entry["matmul"].get(d), measure_matmul(device, d))
            done.append(f"matmul {d}")
    if remeasure or _stale(entry.get("copy")):
        entry["copy"] = _keep(entry.get("copy"), measure_copy(device))
        done.append("copy")
    for old in ("matmul_tflops", "matmul_n", "copy_tbps", "copy_bytes"):  # the pre-spread layout
        entry.pop(old, None)
    return done


def measure_matmul(device: str, dtype: str) -> dict:
    """TFLOP/s of an n x n x n matmul, n doubled from 256 until a call is long enough or n is large."""
    import torch

    n = 256
    while True:
        a, b = (torch.randn(n, n, device=device, dtype=getattr(torch, DTYPES[dtype])) for _ in range(2))
        mm = partial(torch.mm, a, b)
        mm()  # the first call picks kernels and allocates; never timed
        if n >= MATMUL_MAX_N[device] or block_us(mm, 1, device) * 1e-6 >= GROW_UNTIL_S:
            break
        n *= 2
    return _rated(mm, device, 2 * n**3, n)


def measure_copy(device: str) -> dict:
    """TB/s of one large device-to-device copy, counting the bytes read and the bytes written."""
    import torch

    size = COPY_BYTES[device]
    if device == "cuda":
        size = min(size, torch.cuda.mem_get_info()[0] // 4)  # two buffers, room to spare
    src = torch.empty(size // 4, device=device, dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    copy = partial(dst.copy_, src)
    copy()
    return _rated(copy, device, 2 * src.numel() * 4, src.numel() * 4)


def _rated(fn: Callable[[], object], device: str, work: float, size: int) -> dict:
    """The best rate (work per second, in units of 1e12) over timed blocks, the spread of the rates
    over those blocks, and when: a ceiling is what the device can reach, not its average."""
    per_call_us = time_blocks(fn, device, BLOCKS, MIN_TIME_S[device])
    rates = [work / (t * 1e-6) / 1e12 for t in per_call_us]
    spread = Spread.of(rates).as_dict()
    return {"rate": _sig(max(rates)), "size": size, "spread": {k: spread[k] for k in ("median", "p25", "p75",
            "n", "unstable")}, "measured_at": round(time.time())}


def roofline(problem: dict, device_us: float, ceiling: dict | None) -> dict:
    """Achieved rates of one variant and their share of the measured ceilings.

    `bound` is the roof the problem sits under: its intensity at the least bytes against the
    ridge point (matmul FLOP/s / copy bytes/s). A variant moving more bytes (naive writes the
    S x S scores) sits lower under the same roof, which the percentages show."""
    seconds = device_us * 1e-6
    flops, nbytes = problem["flops"], problem["min_bytes"]
    tflops, tbps = flops / seconds / 1e12, nbytes / seconds / 1e12
    out = {"flops": flops, "bytes": nbytes, "intensity": _sig(flops / nbytes), "tflops": _sig(tflops),
           "tbps": _sig(tbps), "pct_of_matmul": None, "pct_of_copy": None, "bound": None,
           # without ceilings: a decode call reads the cache (copy), a forward or a step computes (matmul)
           "judged_against": "copy" if problem.get("mode") == "decode" else "matmul"}
    if ceiling:
        ridge = ceiling["matmul_tflops"] / ceiling["copy_tbps"]  # FLOP per byte where the roofs meet
        bound = "compute" if flops / nbytes >= ridge else "memory"
        out |= {"pct_of_matmul": round(100 * tflops / ceiling["matmul_tflops"], 1),
                "pct_of_copy": round(100 * tbps / ceiling["copy_tbps"], 1), "bound": bound,
                "judged_against": "matmul" if bound == "compute" else "copy",  # the roof the line names
                # the ceilings the percentages used, shown beside them
                "matmul_ceiling_tflops": ceiling["matmul_tflops"], "matmul_ceiling_dtype": ceiling.get("matmul_dtype"),
                "copy_ceiling_tbps": ceiling["copy_tbps"], "ceiling_unstable": ceiling.get("unstable")}
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
    remeasure = bool((results.get("config") or {}).get("remeasure_ceilings"))
    try:
        ceiling = ceilings(results["device"], results["problem"]["dtype"], remeasure)
    except Exception as e:  # noqa: BLE001 - e.g. out of memory next to the variants' buffers
        ceiling = None
        results["ceilings"] = {"error": f"{type(e).__name__}: {' '.join(str(e).split())}"[:300]}
    else:
        results["ceilings"] = ceiling
    for v in timed:
        v["roofline"] = roofline(results["problem"], v["device_us"]["median"], ceiling)


def _sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")
