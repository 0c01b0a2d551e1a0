"""Progress on stderr while traces are analysed (a terminal only; gone once done): how far a big trace's
reading is, then its analysis; how many ranks' traces are done."""

from __future__ import annotations

import sys

from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from attnprof.report.terminal import LiveDisplay, console, stderr_is_live
from attnprof.report.text import safe_text
from attnprof.units import mib


class TraceProgress(LiveDisplay):
    """How far the reading of a big trace is, then that it is being analysed, on stderr (a terminal only)."""

    def __init__(self, trace: str):
        self._name = safe_text(trace)
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                  TextColumn("{task.fields[read]}"), TimeElapsedColumn(),
                                  console=console(sys.stderr), transient=True, disable=not stderr_is_live())
        self._task = self._progress.add_task(f"reading {self._name}", total=None, read="")

    def update(self, stage: str, done: int, total: int | None) -> None:
        if stage == "reading":
            read = f"{mib(done)} of {mib(total)}" if total else f"{mib(done)} inflated"
            self._progress.update(self._task, total=total, completed=done, read=read)
        else:
            self._progress.update(self._task, description=f"{stage} {self._name}", total=None, read="")


class RanksProgress(LiveDisplay):
    """How many of several ranks' traces are analysed, on stderr (a terminal only)."""

    def __init__(self, total: int | None = None):
        self._progress = Progress(SpinnerColumn(), TextColumn("analysing rank traces"), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(),
                                  console=console(sys.stderr), transient=True, disable=not stderr_is_live())
        self._task = self._progress.add_task("ranks", total=total)

    def update(self, stage: str, done: int, total: int | None) -> None:
        self._progress.update(self._task, total=total, completed=done)
