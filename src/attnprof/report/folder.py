"""`attnprof report FOLDER`: the page for the folder it is given, a run's, a `run --nproc` run's (its own
schema, drawn by report.distributed) or a sweep's."""

from __future__ import annotations

import json
from pathlib import Path

from attnprof.files import write_atomic
from attnprof.report import distributed, html


def write_folder_report(folder: str | Path) -> Path:
    """Write report.html into `folder` from what it holds; its path."""
    from attnprof.harness.distributed import SCHEMA as CP_SCHEMA

    folder = Path(folder)
    results = folder / "results.json"
    if not (folder / "sweep.json").is_file() and results.is_file():
        run = json.loads(results.read_text())
        if run.get("schema") == CP_SCHEMA:
            write_atomic(folder / html.REPORT, distributed.cp_run_page(run))
            return folder / html.REPORT
    return html.write_report(folder)
