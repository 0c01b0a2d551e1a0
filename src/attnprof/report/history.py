"""Views of the run history: `attnprof history` (terminal and HTML page) and `attnprof compare`.

The HTML page plots device time per variant across runs, one plot per problem and device kind,
with a dashed line where the environment changed (torch, driver, GPU, ...), so a step in a curve
sits next to its likely cause.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from attnprof.files import write_atomic
from attnprof.history.compare import environment_changes
from attnprof.report.html import _num, _plots, _render, _section
from attnprof.report.plots import _figure, _finish
from attnprof.units import count, spread

VERDICT_STYLE = {"same": "", "faster": "green", "improved": "bold green", "slower": "yellow", "regressed": "bold red"}
VERDICT_CLASS = {"faster": "ok", "improved": "ok", "slower": "unsupported", "regressed": "error"}
MAX_TICKS = 15
UNMARKED = ("hostname", "git_commit")  # change on most CI runs; compare still names them


def render_history(result: dict, out: Console) -> None:
    """Each run as a header line (id, time, kind, problem, device), its command, what changed since
    the previous run of its problem on its device, and one line per variant."""
    runs = result["runs"]
    out.print(f"{len(runs)} runs in {result['store']}, newest first")
    if not runs:
        out.print("No runs recorded yet: `attnprof run`, `sweep` and `lint` record each run here.")
    for run in runs:
        out.print(f"[bold]run {run['id']}[/]  {run['time'].replace('T', ' ')[:-1]} UTC  {run['kind']}  "
                  f"{run['problem']}  on {run['device_kind']}", soft_wrap=True)
        out.print(f"  {run['command']}", soft_wrap=True, markup=False)
        if run.get("changes"):
            out.print(f"  changed since run {run['changes']['since']}: {changes_line(run['changes'])}",
                      soft_wrap=True, markup=False)
        width = max((len(v["name"]) for v in run["variants"]), default=0)
        for v in run["variants"]:
            where = f" @ {v['problem']}" if v["problem"] != run["problem"] else ""
            out.print(f"  {v['name']:{width}}  {v['status']:11}  {spread(v.get('device_us')):24}  "
                      f"{_ops(v)} ops/fwd{where}", markup=False)


def changes_line(changes: dict | None) -> str:
    """`torch 2.10.0 -> 2.11.0; naive kernels 5 -> 6` since the previous run, or `-`."""
    if not changes:
        return "-"
    parts = [f"{k} {d['a']} -> {d['b']}" for k, d in changes["environment"].items()]
    parts += [f"{c['name']} {name} {d['a']:g} -> {d['b']:g}"
              for c in changes["counts"] for name, d in c["counts"].items()]
    return "; ".join(parts) or "nothing"


def _ops(v: dict) -> str:
    ops = v.get("gpu_ops") if v.get("gpu_ops") is not None else v.get("aten_ops")
    return "-" if ops is None else count(ops)


def render_compare(result: dict, out: Console) -> None:
    before = f", persistence against run {result['before_a']}" if result["before_a"] else ""
    out.print(f"[bold]B[/] run {result['b']} against [bold]A[/] run {result['a']}{before}; "
              f"threshold {result['threshold']:.0%}")
    for key, d in result["environment_changes"].items():
        out.print(f"  changed: {key} {d['a']} -> {d['b']}")
    several = len({v["problem"] for v in result["variants"]}) > 1
    table = Table()
    headers = ("variant", *(("problem",) if several else ()), "verdict", "A time/call", "B time/call", "change", "why")
    for col in headers:
        table.add_column(col)
    for v in result["variants"]:
        pct = v["delta"].get("device_pct")
        style = VERDICT_STYLE[v["verdict"]]
        table.add_row(v["name"], *((v["problem"],) if several else ()),
                      f"[{style}]{v['verdict']}[/]" if style else v["verdict"],
                      spread(v["a"]["device_us"]), spread(v["b"]["device_us"]),
                      "-" if pct is None else f"{pct:+.1f}%", v["why"])
    out.print(table)
    for side in ("only_in_a", "only_in_b"):
        if result[side]:
            out.print(f"  {side.replace('_', ' ')}: {', '.join(result[side])}")
    out.print("[bold red]regressed[/]" if result["regressed"] else "nothing regressed")


def write_history_page(result: dict, path: str | Path) -> Path:
    path = Path(path)
    runs = result["runs"]
    rows = [[_num(r["id"]), r["time"], r["kind"], r["problem"], r["device_kind"], r["command"],
             _num(sum(v["status"] == "ok" for v in r["variants"])), changes_line(r.get("changes"))] for r in runs]
    sections = [_plots(history_plots(runs)),
                _section("runs", "Runs, newest first", ("run", "time (UTC)", "kind", "problem", "device", "command",
                                                          "ok variants", "changed since the previous"), rows,
                         "No runs recorded yet.")]
    write_atomic(path, _render("attnprof history", [f"{len(runs)} runs in {result['store']}"], sections))
    return path


def history_plots(runs: list[dict]) -> list[dict]:
    """Per (problem, device kind): device time (median, p25-p75 bars) per variant across runs,
    a dashed line before each run whose environment differs from the previous one's."""
    groups = defaultdict(list)
    for run in sorted(runs, key=lambda r: r["id"]):
        groups[(run["problem"], run["device_kind"])].append(run)
    return [_over_runs(f"Device time per forward, {problem} on {kind}", series)
            for (problem, kind), series in groups.items() if any(t for ts in _times(series).values() for t in ts)]


def _times(series: list[dict]) -> dict[str, list[dict | None]]:
    names = dict.fromkeys(v["name"] for run in series for v in run["variants"])
    return {name: [next((v.get("device_us") for v in run["variants"] if v["name"] == name), None) for run in series]
            for name in names}


def _over_runs(title: str, series: list[dict]) -> dict:
    fig, ax = _figure()
    xs = range(len(series))
    medians = []
    for name, times in _times(series).items():
        med = [t["median"] if t else math.nan for t in times]
        err = [[t["median"] - t["p25"] if t else 0 for t in times], [t["p75"] - t["median"] if t else 0 for t in times]]
        ax.errorbar(xs, med, yerr=err, marker="o", capsize=3, label=name)
        medians += [m for m in med if m > 0]
    for x, (before, run) in enumerate(zip(series, series[1:], strict=False), start=1):
        changed = [k for k in environment_changes(before, run) if k not in UNMARKED]
        if changed:
            ax.axvline(x - 0.5, color="gray", linestyle="--")
            ax.text(x - 0.5, 0.97, " " + ", ".join(changed), transform=ax.get_xaxis_transform(), rotation=90,
                    va="top", ha="right", fontsize=7, color="dimgray")
    step = math.ceil(len(series) / MAX_TICKS)  # a long history labels every step-th run
    ax.set_xticks(list(xs)[::step], [f"#{r['id']}" for r in series][::step])
    if medians and max(medians) > 10 * min(medians):  # variants a decade apart share the plot on a log axis
        ax.set_yscale("log")
    return _finish(fig, ax, title, "device time (µs)", xlabel="run",
                   note="median with p25-p75 bars; dashed: the environment changed (named at the line)")
