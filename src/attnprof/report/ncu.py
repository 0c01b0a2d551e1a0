"""The Nsight Compute view of `attnprof run --ncu`: each variant's kernels with the counters ncu read."""

from __future__ import annotations

import sys

from rich.console import Console

from attnprof.gpu.kernel_names import short_name
from attnprof.report.layout import print_table
from attnprof.report.text import printable, safe_text
from attnprof.units import mib


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _shared(kernel: dict) -> str:
    total = kernel.get("shared_bytes_per_block")
    return "-" if total is None else mib(total)


def _bytes(n: float) -> str:
    return f"{n:,.0f} B"


def occupancy_why(kernel: dict) -> str | None:
    """What holds an SM to its blocks, from the launch: `1 block/SM (12 of 64 warps): shared memory 233,472 B
    a block (232,448 B dynamic + 1,024 B driver) of 233,472 B per SM; registers 168 x 384 threads = ...`."""
    limits, limiter = kernel.get("blocks_per_sm") or {}, kernel.get("occupancy_limiter") or []
    if not limiter:
        return None
    blocks, block = limits[limiter[0]], kernel.get("block_size")
    head = f"{blocks:.0f} block{'s' * (blocks != 1)}/SM"
    if block and kernel.get("warps_per_sm"):
        head += f" ({blocks * -(-block // 32):.0f} of {kernel['warps_per_sm']:.0f} warps)"
    return head + ": " + "; ".join(_why(what, kernel) for what in limiter)


def _why(what: str, k: dict) -> str:
    if what == "shared memory" and k.get("shared_bytes_per_block") is not None:
        parts = [f"{_bytes(k[key])} {label}" for key, label in (("dynamic_shared_bytes", "dynamic"),
                 ("static_shared_bytes", "static"), ("driver_shared_bytes", "driver")) if k.get(key)]
        text = f"shared memory {_bytes(k['shared_bytes_per_block'])} a block ({' + '.join(parts) or 'none'})"
        return text + (f" of {_bytes(k['shared_per_sm_bytes'])} per SM" if k.get("shared_per_sm_bytes") else "")
    if what == "registers" and k.get("registers_per_thread") and k.get("block_size"):
        used = k["registers_per_thread"] * k["block_size"]
        text = f"registers {k['registers_per_thread']:.0f} x {k['block_size']:.0f} threads = {used:,.0f} a block"
        return text + (f" of {k['registers_per_sm']:,.0f} per SM" if k.get("registers_per_sm") else "")
    return what


def _row(variant: str, kernel: dict) -> tuple[str, ...]:
    limiter = kernel.get("occupancy_limiter")
    regs = kernel.get("registers_per_thread")
    return (safe_text(variant), safe_text(short_name(kernel.get("name") or "?")),
            f"{_pct(kernel.get('achieved_occupancy_pct'))} / {_pct(kernel.get('theoretical_occupancy_pct'))}",
            _pct(kernel.get("sm_throughput_pct")), _pct(kernel.get("dram_throughput_pct")),
            _pct(kernel.get("tensor_pipe_pct")), kernel.get("bound") or "-",
            ", ".join(limiter) if limiter else "-", "-" if regs is None else f"{regs:.0f}", _shared(kernel))


def render_ncu(results: dict, out: Console, table: bool = True) -> None:
    """A table of every profiled kernel (unless `table` is False: --json carries them), or the one line on
    stderr that says why there is none."""
    info = results.get("ncu") or {}
    if not info.get("available"):
        print(f"attnprof: {printable(info.get('reason') or '--ncu: no Nsight Compute counters')}", file=sys.stderr)
        return
    if table:
        _print_table(results, out)
        for record in results["variants"]:
            for kernel in (record.get("ncu") or {}).get("kernels", []):
                why = occupancy_why(kernel)
                if why:
                    out.print(f"  {safe_text(record['name'])} {safe_text(short_name(kernel.get('name') or '?'))}: "
                              f"{why}")


COLUMNS = ("variant", "kernel", "occupancy achieved / theoretical", "SM", "DRAM", "tensor pipe", "bound",
           "occupancy limiter", "regs", "shared mem/block")


def _print_table(results: dict, out: Console) -> None:
    rows = []
    for record in results["variants"]:
        counters = record.get("ncu")
        if not counters:
            continue
        if "reason" in counters:
            rows.append((safe_text(record["name"]), f"[yellow]not profiled: {printable(counters['reason'])}[/]"))
        rows += [_row(record["name"], kernel) for kernel in counters.get("kernels", [])]
    print_table(out, "Nsight Compute (one profiled call per variant)", COLUMNS, rows)
