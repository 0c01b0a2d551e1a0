"""The Nsight Compute view of `attnprof run --ncu`: each variant's kernels with the counters ncu read."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from attnprof.gpu.kernel_names import short_name
from attnprof.report.text import printable, safe_text
from attnprof.units import mib


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _shared(kernel: dict) -> str:
    parts = [kernel.get("dynamic_shared_bytes"), kernel.get("static_shared_bytes")]
    return "-" if all(p is None for p in parts) else mib(sum(p or 0 for p in parts))


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
        out.print(_table(results))


def _table(results: dict) -> Table:
    table = Table(title="Nsight Compute (one profiled call per variant)")
    for col in ("variant", "kernel", "occupancy achieved / theoretical", "SM", "DRAM", "tensor pipe", "bound",
                "occupancy limiter", "regs", "shared mem"):
        table.add_column(col)
    for record in results["variants"]:
        counters = record.get("ncu")
        if not counters:
            continue
        if "reason" in counters:
            table.add_row(safe_text(record["name"]), f"[yellow]not profiled: {printable(counters['reason'])}[/]")
        for kernel in counters.get("kernels", []):
            table.add_row(*_row(record["name"], kernel))
    return table
