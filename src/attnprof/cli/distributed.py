"""Several ranks: `attnprof run --nproc N` (context parallelism under torchrun) and `attnprof analyze`
over several traces or a folder of them. Its run options are fields of attnprof.options (group "several
GPUs"); cli.profile hands both forms here."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from attnprof.cli.args import positive_int
from attnprof.options import RunOptions

SHOWN_WARNINGS = 5  # on stderr; every one is in --json


def add_analyze_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=positive_int, default=None,
                   help="processes at once: several traces, one per trace; one trace of 32 MB or more, one per range "
                        "of its events (default: one per core this process may use)")
    p.add_argument("--cluster", default=None, metavar="ADDRESS",
                   help="several traces on Dask distributed: `local`, tcp://host:port or a scheduler file (needs "
                        "pip install 'attnprof[cluster]'); each worker reads its traces where they lie")
    p.add_argument("--ranks-out", default=None, metavar="FILE",
                   help="several traces: also write every rank's row to FILE (.jsonl or .csv)")


def several_traces(args: argparse.Namespace) -> bool:
    """Several ranks' traces: more than one named, a folder, a glob or URL left for attnprof, or --cluster."""
    first = args.trace[0]
    return (len(args.trace) > 1 or args.cluster is not None or args.ranks_out is not None or Path(first).is_dir()
            or "://" in first or (not Path(first).exists() and any(c in first for c in "*?[")))


def cmd_run_ranks(args: argparse.Namespace, options: RunOptions) -> int:
    from attnprof import api

    if not api.is_rank():  # a bad option fails in launch_ranks, before any rank starts
        return api.launch_ranks(options, args.argv)
    results = api.run_ranks(options, listener=_progress(args))
    if results is None:  # not rank 0: rank 0 reports for everyone
        return 0
    from attnprof.cli.history import remember_cp_run
    from attnprof.report import distributed as view
    from attnprof.report.json_view import render_json
    from attnprof.report.terminal import console

    if args.json:
        render_json(results)
    else:
        view.render_cp_run(results, console())
    remember_cp_run(args, results)
    if not args.no_report:
        print(f"attnprof: report {view.write_cp_report(results)}", file=sys.stderr)
    return 0 if all(r["status"] == "ok" for r in results["variants"]) else 1


def _import_views() -> None:
    """The views' imports (rich, jinja2: ~0.1 s), made while the workers read the traces, not before."""
    import attnprof.report.distributed
    import attnprof.report.terminal  # noqa: F401


def _progress(args: argparse.Namespace):
    from attnprof.report.distributed import progress

    return None if args.json else progress


class _RanksShown:
    """How many ranks' traces are analysed, drawn on stderr from the first one done: by then the workers
    have read a while and rich is imported (with the views, or here), not before they start."""

    def __init__(self):
        self._display = None

    def update(self, stage: str, done: int, total: int | None) -> None:
        if self._display is None:
            from attnprof.report.progress import RanksProgress

            self._display = RanksProgress(total).__enter__()
        self._display.update(stage, done, total)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if self._display is not None:
            self._display.__exit__(*exc)


def _cluster(address: str | None) -> contextlib.AbstractContextManager:
    """The Dask client --cluster names (closed on leaving), or None for the local pool."""
    from attnprof import api

    return contextlib.nullcontext() if address is None else api.cluster(address)


def _warn(warnings: list[str]) -> None:
    from attnprof.report.text import printable

    for warning in warnings[:SHOWN_WARNINGS]:
        print(f"attnprof: warning: {printable(warning)}", file=sys.stderr)
    if len(warnings) > SHOWN_WARNINGS:
        print(f"attnprof: ... and {len(warnings) - SHOWN_WARNINGS} more warnings (--json)", file=sys.stderr)


def cmd_analyze_ranks(args: argparse.Namespace) -> int:
    from attnprof import api
    from attnprof.errors import UserError

    views = None if args.json else _import_views
    if args.ranks_out:
        from attnprof.report.rank_table import table_format

        table_format(Path(args.ranks_out))  # a wrong suffix fails here, not after the analysis
        api.not_an_input(args.ranks_out, args.trace)
    with _cluster(args.cluster) as client, _RanksShown() as shown:
        result = api.analyze_ranks(args.trace, args.region, args.max_bytes, args.workers, meanwhile=views,
                                   progress=shown.update if sys.stderr.isatty() else None, client=client)
    _warn(result["warnings"])
    if args.ranks_out:
        from attnprof.report.rank_table import write_rank_table

        print(f"attnprof: per-rank table {write_rank_table(result, Path(args.ranks_out))}", file=sys.stderr)
    if not result["ranks"]:
        raise UserError("no trace could be read")
    if args.json:
        from attnprof.report.json_view import render_json

        render_json(result)
    else:
        from attnprof.report import distributed as view  # imported by now: these bind the names
        from attnprof.report.terminal import console

        view.render_ranks(result, console())
    if args.html:
        from attnprof.report.distributed import write_ranks_report

        print(f"attnprof: report {write_ranks_report(result, args.html)}", file=sys.stderr)
    return 0
