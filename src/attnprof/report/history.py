"""Terminal views of the run history: `attnprof history` and `attnprof compare` (the HTML page of
the history is history_page.py, so these start without matplotlib)."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from attnprof.history.export import export
from attnprof.report.text import TEXT_LIMIT, safe_text
from attnprof.units import count, spread

VERDICT_STYLE = {"same": "", "faster": "green", "improved": "bold green", "slower": "yellow", "regressed": "bold red"}


def render_history(result: dict, out: Console) -> None:
    """Each run as a header line (id, time, kind, problem, device), its command, what changed since
    the previous run of its problem on its device, and one line per variant."""
    runs = result["runs"]
    out.print(f"{len(runs)} run{'' if len(runs) == 1 else 's'} in {safe_text(result['store'], TEXT_LIMIT)}, "
              "newest first", soft_wrap=True)
    if not runs:
        out.print("No runs recorded yet: `attnprof run`, `sweep` and `lint` record each run here.")
    for run in runs:
        out.print(f"[bold]run {run['id']}[/]  {run['time'].replace('T', ' ')[:-1]} UTC  {run['kind']}  "
                  f"{safe_text(run['problem'])}  on {safe_text(run['device_kind'])}", soft_wrap=True)
        out.print(f"  {safe_text(run['command'], TEXT_LIMIT)}", soft_wrap=True)
        if run.get("changes"):
            out.print(f"  changed since run {run['changes']['since']}: "
                      f"{safe_text(changes_line(run['changes']), TEXT_LIMIT)}", soft_wrap=True)
        width = max((len(v["name"]) for v in run["variants"]), default=0)
        for v in run["variants"]:
            where = f" @ {v['problem']}" if v["problem"] != run["problem"] else ""
            out.print(safe_text(f"  {v['name']:{width}}  {v['status']:11}  {spread(v.get('device_us')):24}  "
                                f"{_ops(v)} ops/{_unit(v['problem'])}{where}", TEXT_LIMIT), soft_wrap=True)


def _unit(problem: str) -> str:
    """`step` for a training step's row (its problem tag says `_train`, as Problem.tag writes it), else `fwd`."""
    return "step" if "train" in problem.split("_") else "fwd"


def changes_line(changes: dict | None) -> str:
    """`torch 2.10.0 -> 2.11.0; naive kernels 5 -> 6` since the previous run, or `-`."""
    if not changes:
        return "-"
    parts = [f"{k} {d['a']} -> {d['b']}" for k, d in changes["environment"].items()]
    parts += [f"{c['name']} {name} {count(d['a'])} -> {count(d['b'])}"
              for c in changes["counts"] for name, d in c["counts"].items()]
    return "; ".join(parts) or "nothing"


def _ops(v: dict) -> str:
    ops = v.get("gpu_ops") if v.get("gpu_ops") is not None else v.get("aten_ops")
    return "-" if ops is None else count(ops)


def render_compare(result: dict, out: Console) -> None:
    if result["a"] is None:
        out.print(f"run {result['b']} is the first of its problem on its kind of device: nothing to compare with "
                  "yet (name a run to compare with: attnprof compare A B)", soft_wrap=True)
        return
    before = f", persistence against run {result['before_a']}" if result["before_a"] else ""
    out.print(f"[bold]B[/] run {result['b']} against [bold]A[/] run {result['a']}{before}; "
              f"threshold {result['threshold']:.0%}")
    for key, d in result["environment_changes"].items():
        out.print(safe_text(f"  changed: {key} {d['a']} -> {d['b']}", TEXT_LIMIT), soft_wrap=True)
    several = len({v["problem"] for v in result["variants"]}) > 1
    table = Table()
    headers = ("variant", *(("problem",) if several else ()), "verdict", "A time/call", "B time/call", "change", "why")
    for col in headers:
        table.add_column(col)
    for v in result["variants"]:
        pct = v["delta"].get("device_pct")
        style = VERDICT_STYLE[v["verdict"]]
        table.add_row(safe_text(v["name"]), *((safe_text(v["problem"]),) if several else ()),
                      f"[{style}]{v['verdict']}[/]" if style else v["verdict"],
                      spread(v["a"]["device_us"]), spread(v["b"]["device_us"]),
                      "-" if pct is None else f"{pct:+.1f}%", safe_text(v["why"], TEXT_LIMIT))
    out.print(table)
    for side in ("only_in_a", "only_in_b"):
        if result[side]:
            out.print(f"  {side.replace('_', ' ')}: {safe_text(', '.join(result[side]), TEXT_LIMIT)}", soft_wrap=True)
    out.print("[bold red]regressed[/]" if result["regressed"] else "nothing regressed")


def render_export(runs: list[dict], fmt: str) -> None:
    """`history --export csv|jsonl` on stdout, for other tools."""
    sys.stdout.write(export(runs, fmt))
