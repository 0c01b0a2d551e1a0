"""`history` (the recorded runs) and `compare` (the regression gate), and the recording that `run`,
`sweep` and `lint` do through `remember` (with --db and --no-history)."""

from __future__ import annotations

import argparse
import sys

from attnprof.cli.args import positive_int
from attnprof.errors import UserError

EXIT_REGRESSED = 1
DB_HELP = "the history store (default: $ATTNPROF_HOME/history.sqlite, else the user data folder)"


def add_history_args(p: argparse.ArgumentParser) -> None:
    """--db and --no-history for a subcommand that records its run."""
    p.add_argument("--db", default=None, metavar="PATH", help=DB_HELP)
    p.add_argument("--no-history", action="store_true", help="do not record this run in the history")


def remember(args: argparse.Namespace, kind: str, result: dict) -> None:
    """Record the `kind` result (run, sweep, lint, verify) in the history, unless --no-history. The results
    are already on disk, so a store that cannot take the run costs a warning, not the run."""
    if args.no_history:
        return
    import sqlite3  # here, not at the CLI's start: ~1 MB resident that every `analyze` would hold too

    from attnprof import api

    try:
        run_id, path = api.record(kind, result, command_line(args), args.db)
    except (UserError, sqlite3.Error, OSError) as e:
        print(f"attnprof: warning: not recorded in the history: {' '.join(str(e).split())}", file=sys.stderr)
        return
    if run_id is not None:
        print(f"attnprof: history run {run_id} in {path}", file=sys.stderr)


def remember_cp_run(args: argparse.Namespace, results: dict) -> None:
    """Rank 0 records a `run --nproc N` run, under the command the user typed (the ranks ran without --nproc)."""
    argv = list(args.argv)
    at = argv.index("run") + 1 if "run" in argv else 0
    args.argv = [*argv[:at], "--nproc", str(results["config"]["world_size"]), *argv[at:]]
    remember(args, "cp-run", results)


def command_line(args: argparse.Namespace) -> str:
    import shlex

    return shlex.join(["attnprof", *getattr(args, "argv", sys.argv[1:])])


def threshold(text: str) -> float:
    """`5%` or `0.05` -> 0.05: a share of A's median, written as a percentage or as a fraction (as the JSON
    contract writes it); a bare number of 1 or more (`5`) is refused as ambiguous, never read as 5%."""
    given = text.strip()
    try:
        value = float(given.removesuffix("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage like 5% or a fraction like 0.05, "
                                         f"got {text!r}") from None
    if given.endswith("%"):
        value /= 100
    elif value >= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is ambiguous: write {given}% for a percentage, or a fraction "
                                         "below 1 (0.05 is 5%)")
    if not 0 <= value < 10:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1000%, got {text!r}")
    return value


def register(sub) -> None:
    history = sub.add_parser("history", help="the recorded runs, newest first, with what changed between them")
    history.add_argument("--db", default=None, metavar="PATH", help=DB_HELP)
    history.add_argument("--json", action="store_true", help="print attnprof.history/1 JSON")
    history.add_argument("--since", default=None, help="runs since a date (2026-11-01) or an age (7d, 12h)")
    history.add_argument("--variant", default=None, help="only runs of this variant, only its rows")
    history.add_argument("--export", choices=("csv", "jsonl"), default=None, help="print the runs as CSV or JSONL")
    history.add_argument("--html", default=None, metavar="PATH", help="also write the history page (plots) to PATH")
    history.set_defaults(func=cmd_history)

    compare = sub.add_parser("compare", help="run B against run A per variant; exit 1 when something regressed")
    compare.add_argument("a", nargs="?", type=positive_int, default=None,
                         help="default: the previous run of B's problem on B's kind of device")
    compare.add_argument("b", nargs="?", type=positive_int, default=None, help="default: the latest run")
    compare.add_argument("--db", default=None, metavar="PATH", help=DB_HELP)
    compare.add_argument("--json", action="store_true", help="print attnprof.compare/1 JSON")
    compare.add_argument("--threshold", type=threshold, default=None, metavar="PCT",
                         help="a time moves only beyond both spreads and this much: 5%% or 0.05 (default 5%%)")
    compare.set_defaults(func=cmd_compare)


def cmd_history(args: argparse.Namespace) -> int:
    from attnprof import api

    result = api.history(args.db, since=args.since, variant=args.variant)
    if args.export:
        from attnprof.report.history import render_export

        render_export(result["runs"], args.export)
    elif args.json:
        from attnprof.report.json_view import render_json

        render_json(result)
    else:
        from attnprof.report.history import render_history
        from attnprof.report.terminal import console

        render_history(result, console())
    if args.html:
        from attnprof.report.history_page import write_history_page

        print(f"attnprof: history page {write_history_page(result, args.html)}", file=sys.stderr)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from attnprof import api

    result = api.compare(args.a, args.b, db=args.db, threshold=args.threshold)
    if args.json:
        from attnprof.report.json_view import render_json

        render_json(result)
    else:
        from attnprof.report.history import render_compare
        from attnprof.report.terminal import console

        render_compare(result, console())
    return EXIT_REGRESSED if result["regressed"] else 0
