"""`attnprof report FOLDER`: the page for the folder it is given, a run's, a `run --nproc` run's (its own
schema, drawn by report.distributed) or a sweep's."""

from __future__ import annotations

from pathlib import Path

from attnprof.contracts import CP_RUN, RESULTS, SWEEP_SPEC, read_json
from attnprof.files import write_atomic
from attnprof.report import distributed, html


def write_folder_report(folder: str | Path) -> Path:
    """Write report.html into `folder` from what it holds; its path."""
    folder = Path(folder)
    results = folder / RESULTS
    if not (folder / SWEEP_SPEC).is_file() and results.is_file():
        run = read_json(results)
        if run.get("schema") == CP_RUN:
            write_atomic(folder / html.REPORT, distributed.cp_run_page(run))
            return folder / html.REPORT
    return html.write_report(folder)
