"""`sweep` (the variants over a grid of problems) and `report` (the HTML page of a run or sweep folder)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attnprof.cli.args import add_problem_args
from attnprof.cli.history import add_history_args, command_line, remember
from attnprof.errors import UserError

AXES = ("batch", "heads", "seq", "head_dim")
RESUME_HONOURS = {"help", "resume", "json", "no_report", "db", "no_history"}  # the rest comes from sweep.json
WORKLOAD = {"mode": "fwd", "kv_heads": None, "mask": "causal"}  # list axes and their one value when not given


def register(sub) -> None:
    sweep = sub.add_parser("sweep", help="run the variants over lists of sizes (every combination)")
    add_problem_args(sweep, as_lists=True)
    sweep.add_argument("--profile", action="store_true", help="also profile each point (traces; slower)")
    sweep.add_argument("--resume", default=None, metavar="DIR", help="continue an interrupted sweep in DIR")
    sweep.add_argument("--no-report", action="store_true", help="skip report.html in the sweep folder")
    sweep.add_argument("--json", action="store_true", help="print the lines and fitted exponents as JSON")
    add_history_args(sweep)
    # what sweep.json fixes: given with --resume, such a flag would be ignored (its flag and default)
    fixed = {a.dest: (a.option_strings[0], a.default) for a in sweep._actions
             if a.option_strings and a.dest not in RESUME_HONOURS}
    sweep.set_defaults(func=cmd_sweep, fixed_by_spec=fixed)

    report = sub.add_parser("report", help="write report.html for a run or sweep folder")
    report.add_argument("folder")
    report.set_defaults(func=cmd_report)


def cmd_sweep(args: argparse.Namespace) -> int:
    from attnprof.harness.sweep import new_sweep, run_sweep
    from attnprof.history import records
    from attnprof.report import terminal
    from attnprof.report.plots import scaling

    spec, sweep_dir = _resumed(args) if args.resume else (_spec(args), None)
    sweep_dir = sweep_dir or new_sweep(spec, Path(args.out))
    console = terminal.console()
    print(f"attnprof: sweep of {len(spec.points())} points x {len(spec.variants)} variants in {sweep_dir}",
          file=sys.stderr)
    with terminal.SweepProgress(console, quiet=args.json) as progress:
        try:
            lines = run_sweep(spec, sweep_dir, progress.update)
        except KeyboardInterrupt:  # main prints the one message
            raise KeyboardInterrupt(f"finished points are in {sweep_dir / 'results.jsonl'}; "
                                    f"continue with --resume {sweep_dir}") from None
    fits = scaling(lines)
    if args.json:
        terminal.render_json({"sweep_dir": str(sweep_dir), "scaling": fits, "lines": lines})
    else:
        terminal.render_sweep(lines, fits, console)
    remember(args, lambda env: records.from_sweep(sweep_dir, lines, command_line(args), env))
    if not args.no_report:
        from attnprof.report.html import write_report

        print(f"attnprof: report {write_report(sweep_dir)}", file=sys.stderr)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from attnprof.report.folder import write_folder_report

    print(write_folder_report(args.folder))
    return 0


def _spec(args: argparse.Namespace):
    """The sweep's grid from the list options; an axis left out takes the device's default problem."""
    from attnprof import variants as registry
    from attnprof.api import default_problem
    from attnprof.harness.runner import resolve_device
    from attnprof.harness.sweep import SweepSpec

    device = resolve_device(args.device)
    base, _ = default_problem(device)
    axes = {a: tuple(getattr(args, a) or [getattr(base, a)]) for a in AXES}
    return SweepSpec(**axes, dtype=tuple(args.dtype), variants=tuple(args.variants or registry.names()),
                     device=device, repeats=args.repeats, graph=not args.no_graph, compile=args.compile,
                     kernel=args.kernel, profile=args.profile, rotate_inputs=args.rotate_inputs, threads=args.threads,
                     **{a: tuple(getattr(args, a) or [one]) for a, one in WORKLOAD.items()},
                     dense_mask=args.dense_mask, q_len=args.q_len)


def _resumed(args: argparse.Namespace):
    from attnprof.harness.sweep import load_spec

    ignored = [flag for dest, (flag, default) in args.fixed_by_spec.items() if getattr(args, dest) != default]
    if ignored:
        raise UserError(f"--resume continues the sweep as {args.resume} defines it, so it would ignore "
                        f"{', '.join(ignored)}: drop {'them' if len(ignored) > 1 else 'it'}")
    return load_spec(Path(args.resume)), Path(args.resume)
