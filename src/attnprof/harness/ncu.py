"""Nsight Compute counters for each variant's kernels (`attnprof run --ncu`): what CUPTI cannot give.

For every variant that ran, a child process (harness/ncu_child.py) rebuilds it, warms it up, and
makes one more call inside the NVTX range `attnprof_ncu`; `ncu` runs that child and profiles only
the kernels launched in the range (so autotuning and warm-up launches are left out). The counters
are read from ncu's own report: its Python module `ncu_report` (shipped in ncu's extras/python),
else its CSV export of the raw page (`ncu --import R --csv --page raw`); never its text output.

Per kernel: achieved and theoretical occupancy (CUPTI reads 0% achieved for a driver-API launch such
as cuDNN's), SM, memory and DRAM throughput as % of peak, tensor-pipe utilisation, what bounds it,
the occupancy limiter and the blocks each resource lets an SM hold, registers, shared memory per block
(dynamic + static + driver, in bytes: ncu prints sizes scaled, `Kbyte/block 232.448`, so the CSV is
read with `--print-units base` and every size is scaled by its unit), block and grid.
Without ncu on PATH, or on a CPU run, the run goes on and results["ncu"] says why in one line.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from attnprof.harness.child import python_running

NVTX_RANGE = "attnprof_ncu"
SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "ComputeWorkloadAnalysis")
MAX_KERNELS = 32  # kernels profiled per variant: each is replayed once per counter pass
TIMEOUT_S = 900
METRICS = {  # our field -> ncu metric
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "theoretical_occupancy_pct": "sm__maximum_warps_per_active_cycle_pct",
    "sm_throughput_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "memory_throughput_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_throughput_pct": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "duration_ns": "gpu__time_duration.sum",
    "registers_per_thread": "launch__registers_per_thread",
    "dynamic_shared_bytes": "launch__shared_mem_per_block_dynamic",  # what the launch asked for (cuDNN: ~227 KiB)
    "static_shared_bytes": "launch__shared_mem_per_block_static",
    "driver_shared_bytes": "launch__shared_mem_per_block_driver",  # reserved by the driver for each block
    "shared_per_sm_bytes": "launch__shared_mem_config_size",  # the SM's shared-memory carveout for this launch
    "registers_per_sm": "device__attribute_max_registers_per_multiprocessor",
    "warps_per_sm": "device__attribute_max_warps_per_multiprocessor",
    "block_size": "launch__block_size",
    "grid_size": "launch__grid_size",
}
OCCUPANCY_LIMITS = {"registers": "launch__occupancy_limit_registers",
                    "shared memory": "launch__occupancy_limit_shared_mem",
                    "warps": "launch__occupancy_limit_warps", "blocks": "launch__occupancy_limit_blocks"}
TENSOR_PIPE = re.compile(r"^sm__pipe_tensor\w*_cycles_active\.avg\.pct_of_peak_sustained_active$")
BYTE_PREFIX = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
LATENCY_BOUND_PCT = 60.0  # under this for both SM and memory throughput, ncu calls a kernel latency-bound


def find_ncu() -> str | None:
    return shutil.which("ncu")


def unavailable_reason(device: str) -> str | None:
    """None when ncu can profile this run; else the one-line note the run shows."""
    if device != "cuda":
        return "--ncu profiles CUDA kernels; this run is on the CPU, so it has no Nsight Compute counters"
    if find_ncu() is None:
        return "--ncu: ncu (Nsight Compute) is not on PATH; the run has no Nsight Compute counters"
    return None


def ncu_command(ncu: str, report: Path, child_args: list[str]) -> list[str]:
    sections = [arg for name in SECTIONS for arg in ("--section", name)]
    return [ncu, "--clock-control", "none", "--target-processes", "all", "--nvtx", "--nvtx-include",
            f"{NVTX_RANGE}/", "--launch-count", str(MAX_KERNELS), *sections, "--export", str(report),
            "--force-overwrite", *child_args]


def _number(text) -> float | str | None:
    if text is None:
        return None
    if isinstance(text, int | float):
        return float(text)
    cleaned = str(text).replace(",", "").strip()
    try:
        return float(cleaned)
    except ValueError:
        return cleaned or None


def in_bytes(value: float | str | None, unit: str | None) -> float | str | None:
    """A value in bytes where its unit is a size (`Kbyte/block`: ncu scales sizes for display, so a
    227 KiB block reads `232.45`), else as it is."""
    base = (unit or "").split("/")[0].strip()
    prefix = base.removesuffix("byte").removesuffix("B") if base.endswith(("byte", "B")) else None
    if not isinstance(value, float) or prefix not in BYTE_PREFIX:
        return value
    return value * BYTE_PREFIX[prefix]


def parse_raw_csv(text: str) -> list[dict]:
    """`ncu --csv --page raw` output -> one {metric: value} dict per kernel, sizes in bytes by the units row."""
    rows = list(csv.reader(io.StringIO(text.strip())))
    header = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if header is None:
        return []
    names = rows[header]
    id_column = names.index("ID") if "ID" in names else 0
    units = [""] * len(names)
    kernels = []
    for row in rows[header + 1:]:
        if len(row) != len(names):
            continue
        if not row[id_column].strip().isdigit():  # the units row (or a line that is not a kernel)
            units = units if kernels else row
            continue
        kernels.append({name: (cell if name == "Kernel Name" else in_bytes(_number(cell), unit))
                        for name, cell, unit in zip(names, row, units, strict=True)})
    return kernels


def counters(metrics: dict) -> dict:
    """Our per-kernel record from one kernel's {metric: value}."""
    def num(name):
        value = metrics.get(name)
        return value if isinstance(value, float) else None

    record = {"name": metrics.get("Kernel Name") or metrics.get("name")}
    record |= {field: num(metric) for field, metric in METRICS.items()}
    tensor = [v for k, v in metrics.items() if TENSOR_PIPE.match(k) and isinstance(v, float)]
    record["tensor_pipe_pct"] = max(tensor) if tensor else None
    limits = {what: num(metric) for what, metric in OCCUPANCY_LIMITS.items() if num(metric) is not None}
    fewest = min(limits.values()) if limits else None
    record["occupancy_limiter"] = [what for what, n in limits.items() if n == fewest] or None
    record["blocks_per_sm"] = limits or None  # per resource, the blocks an SM could hold
    shared = [record[k] for k in ("dynamic_shared_bytes", "static_shared_bytes", "driver_shared_bytes")]
    record["shared_bytes_per_block"] = None if all(v is None for v in shared) else sum(v or 0 for v in shared)
    record["bound"] = _bound(record["sm_throughput_pct"], record["memory_throughput_pct"])
    return record


def _bound(sm: float | None, memory: float | None) -> str | None:
    if sm is None or memory is None:
        return None
    if max(sm, memory) < LATENCY_BOUND_PCT:
        return "latency"
    return "compute" if sm >= memory else "memory"


def read_with_module(report: Path, ncu: str) -> list[dict] | None:
    """Kernels' metrics through ncu's Python module, or None where it cannot be imported."""
    extras = Path(os.path.realpath(ncu)).parent / "extras" / "python"
    if str(extras) not in sys.path and extras.is_dir():
        sys.path.append(str(extras))
    try:
        import ncu_report
    except ImportError:
        return None
    context = ncu_report.load_report(str(report))
    kernels = []
    for r in range(context.num_ranges()):
        span = context.range_by_idx(r)
        for a in range(span.num_actions()):
            action = span.action_by_idx(a)
            metrics = {"name": action.name()}
            for name in action.metric_names():
                metrics[name] = _metric_value(action.metric_by_name(name))
            kernels.append(metrics)
    return kernels


def _metric_value(metric) -> float | str | None:
    try:
        value = float(metric.as_double())
    except (TypeError, ValueError, AttributeError, RuntimeError):
        return _number(metric.as_string())
    unit = metric.unit() if hasattr(metric, "unit") else None
    return in_bytes(value, unit if isinstance(unit, str) else None)


def read_report(report: Path, ncu: str) -> list[dict]:
    try:
        kernels = read_with_module(report, ncu)
    except Exception:  # noqa: BLE001 - a module from another ncu release: its CSV export still reads
        kernels = None
    if kernels is not None:
        return kernels
    done = subprocess.run([ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"],
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"ncu --import failed: {done.stderr.strip()[-200:]}")
    return parse_raw_csv(done.stdout)


def profile_variant(spec: dict, ncu: str, work: Path) -> dict:
    """Run one variant's child under ncu; {"kernels": [...]} or {"reason": ...}."""
    spec_path = work / f"{spec['variant']}.json"
    spec_path.write_text(json.dumps(spec))
    report = work / spec["variant"].replace("+", "_")
    child = [*python_running("attnprof.harness.ncu_child", "main"), str(spec_path)]
    try:
        done = subprocess.run(ncu_command(ncu, report, child), capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"reason": f"ncu ran over {TIMEOUT_S} s"}
    rep = Path(f"{report}.ncu-rep")  # ncu adds the suffix to the --export name
    if done.returncode != 0 or not rep.exists():
        tail = " ".join((done.stderr or done.stdout).split())[-240:]
        return {"reason": f"ncu exited {done.returncode}: {tail}"}
    return {"kernels": [counters(k) for k in read_report(rep, ncu)]}


def add_ncu(results: dict, config) -> None:
    """results["ncu"] (how it went) and variant["ncu"] (its kernels' counters) for each variant that ran."""
    reason = unavailable_reason(config.device)
    if reason:
        results["ncu"] = {"available": False, "reason": reason}
        return
    ncu = find_ncu()
    results["ncu"] = {"available": True, "ncu": ncu, "sections": list(SECTIONS)}
    with tempfile.TemporaryDirectory(prefix="attnprof-ncu-") as work:
        for record in results["variants"]:
            if record.get("status") != "ok" or record.get("family") == "target":
                continue
            spec = {"variant": record["name"], "problem": results["problem"], "kernel": config.options.kernel,
                    "warmup": config.options.warmup, "rotate_inputs": config.options.rotate_inputs}
            record["ncu"] = profile_variant(spec, ncu, Path(work))
