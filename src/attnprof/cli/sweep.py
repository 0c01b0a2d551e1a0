"""`sweep` (the variants over a grid of problems) and `report` (the HTML page of a run or sweep folder)."""

from __future__ import annotations

import argparse
import sys

from attnprof.cli.args import add_options, given_options
from attnprof.cli.history import add_history_args, remember
from attnprof.errors import UserError
from attnprof.options import AXES, SWEEP, flag_of, offered


def register(sub) -> None:
    sweep = sub.add_parser("sweep", help="run the variants over lists of sizes (every combination)")
    add_options(sweep, SWEEP)
    sweep.add_argument("--resume", default=None, metavar="DIR", help="continue an interrupted sweep in DIR")
    sweep.add_argument("--no-report", action="store_true", help="skip report.html in the sweep folder")
    sweep.add_argument("--json", action="store_true", help="print the lines and fitted exponents as JSON")
    add_history_args(sweep)
    sweep.set_defaults(func=cmd_sweep)

    report = sub.add_parser("report", help="write report.html for a run or sweep folder")
    report.add_argument("folder")
    report.set_defaults(func=cmd_report)


def cmd_sweep(args: argparse.Namespace) -> int:
    from attnprof import api
    from attnprof.report import terminal

    given = given_options(args, SWEEP)
    if args.resume and given:  # sweep.json fixes every option: one given here would be ignored
        flags = [flag_of(f) for f in offered(SWEEP) if f.name in given]
        raise UserError(f"--resume continues the sweep as {args.resume} defines it, so it would ignore "
                        f"{', '.join(flags)}: drop {'them' if len(flags) > 1 else 'it'}")
    grid = {a: given.pop(a) for a in AXES if a in given}
    console = terminal.console()
    todo = []
    with terminal.SweepProgress(console, quiet=args.json) as progress:
        def listen(event: str, record: dict) -> None:
            if event == "sweep":
                todo.append(record["todo"])
                print(f"attnprof: sweep of {record['total']} points x {record['variants']} variants in "
                      f"{record['path']}", file=sys.stderr)
            progress.update(event, record)

        try:
            result = api.sweep(grid, resume=args.resume, listener=listen, **given)
        except KeyboardInterrupt:  # main prints the one message
            if progress.sweep_dir:
                raise KeyboardInterrupt(f"finished points are in {progress.sweep_dir}/results.jsonl; "
                                        f"continue with --resume {progress.sweep_dir}") from None
            raise
    if args.json:
        from attnprof.report.json_view import render_json

        render_json(result)
    else:
        terminal.render_sweep(result["lines"], result["scaling"], console)
    if args.resume and todo == [0]:  # it ran nothing: its run is in the history already, or was never whole
        print("attnprof: the sweep was already complete: nothing ran, nothing recorded in the history again",
              file=sys.stderr)
    else:
        remember(args, "sweep", result)
    if not args.no_report:
        from attnprof.report.html import write_report

        print(f"attnprof: report {write_report(result['sweep_dir'])}", file=sys.stderr)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from attnprof import api

    print(api.report(args.folder))
    return 0
