"""The HTML page of `attnprof history --html`: device time per variant across runs, one plot per
problem and device kind, a dashed line where the environment changed (torch, driver, GPU, ...) so a
step in a curve sits next to its likely cause, and the table of runs."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from attnprof.files import write_atomic
from attnprof.history.compare import environment_changes
from attnprof.report import page
from attnprof.report.history import changes_line
from attnprof.report.plots import figure, finish

MAX_TICKS = 15
UNMARKED = ("hostname", "git_commit")  # change on most CI runs; compare still names them


def write_history_page(result: dict, path: str | Path) -> Path:
    path = Path(path)
    runs = result["runs"]
    rows = [[page.num(r["id"]), r["time"], r["kind"], r["problem"], r["device_kind"], r["command"],
             page.num(sum(v["status"] == "ok" for v in r["variants"])), changes_line(r.get("changes"))] for r in runs]
    sections = [page.plots_section(history_plots(runs)),
                page.section("runs", "Runs, newest first", ("run", "time (UTC)", "kind", "problem", "device", "command",
                                                          "ok variants", "changed since the previous"), rows,
                         "No runs recorded yet.")]
    write_atomic(path, page.render("attnprof history", [f"{len(runs)} runs in {result['store']}"], sections))
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
    fig, ax = figure()
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
    return finish(fig, ax, title, "device time (µs)", xlabel="run",
                   note="median with p25-p75 bars; dashed: the environment changed (named at the line)")
