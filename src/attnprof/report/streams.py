"""The time-line breakdown per GPU stream (analysis/timeline.py) as a person reads it: a table in the text
output, rows for the HTML page. Stream and device ids come from the trace: shown through safe_text."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from attnprof.report.text import safe_text
from attnprof.units import us

HEADERS = ("GPU", "stream", "activities", "span", "compute", "communication", "memory", "idle",
           "idle: host wait", "idle: kernel wait", "idle: other", "queue: median / max")


def rows(d: dict) -> list[list[str]]:
    """One row per stream, and one per GPU of several streams (them together, "all")."""
    timeline = d.get("timeline") or {}
    out = []
    for dev in timeline.get("devices") or []:
        if len(dev["streams"]) > 1:
            out.append(_row(dev, "all", {}))
        out += [_row(dict(s, device=dev["device"]), str(s["stream"]), s["idle_by_cause"]) for s in dev["streams"]]
    return out


def _row(x: dict, stream: str, causes: dict) -> list[str]:
    idle = f"{us(x['idle_us'])}" + (f" ({x['idle_share']:.0%})" if x.get("idle_share") is not None else "")
    return [safe_text(str(x["device"])), safe_text(stream), str(x["activities"]), us(x["span_us"]),
            us(x["compute_us"]), us(x["communication_us"]), us(x["memory_us"]), idle,
            *(us(causes[k]) if causes else "-" for k in ("host_wait_us", "kernel_wait_us")), _other(x, causes),
            f"{queue['median']:g} / {queue['max']}" if (queue := x.get("queue_length")) else "-"]


def _other(x: dict, causes: dict) -> str:
    """The "other" idle time, and how much of it another stream of the GPU ran through."""
    if not causes:
        return "-"
    beside = x.get("other_while_other_streams_run_us") or 0.0
    return us(causes["other_us"]) + (f" ({us(beside)} while other streams ran)" if beside else "")


def delay_line(d: dict) -> str | None:
    """Launch to start, medians over the region's instances."""
    delay = (d.get("timeline") or {}).get("launch_delay")
    if not delay:
        return None
    unit = d.get("unit") or "forward"
    return (f"launch to start per {unit}: median {us(delay['median_us'])}, longest {us(delay['max_us'])} "
            f"(medians over {len(delay['per_instance'])} {unit}s)")


def render_streams(d: dict, out: Console) -> None:
    """The table of `rows` and the launch-delay line, when the trace has GPU activities."""
    found = rows(d)
    if not found:
        return
    table = Table(title="GPU time per stream, whole trace (HTA's kinds and idle causes)")
    for col in HEADERS:
        table.add_column(col, overflow="fold")
    for row in found:
        table.add_row(*row)
    out.print(table)
    line = delay_line(d)
    if line:
        out.print(line)
