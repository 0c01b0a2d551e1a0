"""`run`, `analyze`, `list` and `diff`: profile variants, read a trace, list variants, compare two results.

Handlers parse nothing and draw nothing: they call the library, then a view in report/."""

from __future__ import annotations

import argparse
import contextlib
import sys

from attnprof.cli.args import add_device, add_options, given_options, positive_int
from attnprof.cli.distributed import add_analyze_args, several_traces
from attnprof.cli.history import add_history_args, remember
from attnprof.options import RUN, RunOptions

PROGRESS_MIN_BYTES = 256 << 20  # a trace this big takes seconds to read (~0.1 GB/s a core): say how far it is


def register(sub) -> None:
    run = sub.add_parser("run", help="profile attention variants side by side")
    add_options(run, RUN)
    run.add_argument("--json", action="store_true", help="print results.json instead of tables")
    run.add_argument("--target", default=None, help="your module too: file.py:factory or pkg.mod:factory")
    run.add_argument("--no-report", action="store_true", help="skip report.html in the run folder")
    add_history_args(run)
    run.set_defaults(func=cmd_run)

    analyze = sub.add_parser("analyze", help="attribute a torch.profiler trace's GPU work to its regions")
    analyze.add_argument("trace", nargs="+", help="a trace; several ranks' traces, or a folder of them")
    add_analyze_args(analyze)
    analyze.add_argument("--region", default=None,
                         help="default: the region holding the most GPU time (the profiler steps, unless a "
                              "record_function name holds all their work); '(whole trace)': the whole trace")
    analyze.add_argument("--json", action="store_true")
    analyze.add_argument("--max-bytes", type=positive_int, default=None,
                         help="the most bytes read from the trace (default: all of a plain file, read in pieces; "
                              "4 GiB decompressed from a gzip, or from a pipe)")
    analyze.add_argument("--html", default=None, metavar="FILE", help="also write the HTML report to FILE")
    analyze.set_defaults(func=cmd_analyze)

    lst = sub.add_parser("list", help="the variants and whether each can run here")
    add_device(lst)
    lst.add_argument("--kernel", default=None, help="hub variant: the kernel run would load (as for run)")
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(func=cmd_list)

    diff = sub.add_parser("diff", help="compare two traces or two run results")
    diff.add_argument("a")
    diff.add_argument("b")
    diff.add_argument("--region", default=None)
    diff.add_argument("--json", action="store_true")
    diff.set_defaults(func=cmd_diff)


def cmd_run(args: argparse.Namespace) -> int:
    from attnprof import api

    options = RunOptions(**given_options(args, RUN))
    if options.nproc or api.is_rank():
        from attnprof.cli.distributed import cmd_run_ranks

        return cmd_run_ranks(args, options)
    from attnprof.report import terminal

    console = terminal.console()
    note = None if args.json else api.cpu_default_problem(options)  # shown once the run started, not before an error
    with terminal.RunProgress(console, quiet=args.json, cpu_default=note) as progress:
        try:
            results = api.run(options=options, listener=progress.update, target=args.target)
        except KeyboardInterrupt:  # main prints the one message
            if progress.run_dir:
                raise KeyboardInterrupt(f"finished variants are in {progress.run_dir}") from None
            raise
    if args.json:
        from attnprof.report.json_view import render_json

        render_json(results)
    else:
        terminal.render_run(results, console)
    if options.ncu:
        from attnprof.report.ncu import render_ncu

        render_ncu(results, console, table=not args.json)
    remember(args, "run", results)
    if not args.no_report:
        from attnprof.report.html import write_report

        print(f"attnprof: report {write_report(results['run_dir'])}", file=sys.stderr)
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from attnprof import api

    if args.html:
        api.not_an_input(args.html, args.trace)  # `--html t.json` would replace the trace it reads
    if several_traces(args):
        from attnprof.cli.distributed import cmd_analyze_ranks

        return cmd_analyze_ranks(args)
    from attnprof.report.text import printable

    trace = args.trace[0]
    with _trace_progress(trace) as shown:
        result = api.analyze(trace, args.region, args.max_bytes, args.workers, progress=shown and shown.update)
    for warning in result["warnings"]:
        print(f"attnprof: warning: {printable(warning)}", file=sys.stderr)
    _show(args, result, lambda terminal, out: terminal.render_analysis(result, out))
    if args.html:
        from attnprof.report.html import write_analysis_report

        print(f"attnprof: report {write_analysis_report(result, trace, args.html)}", file=sys.stderr)
    return 0


def _trace_progress(trace: str) -> contextlib.AbstractContextManager:
    """A progress display on stderr while a big trace is read and analysed, on a terminal (its value: the
    display, with `update`); else a context whose value is None (and rich is not imported for it)."""
    from attnprof import api

    try:
        big = api.trace_size(trace) >= PROGRESS_MIN_BYTES  # a gzip by what it inflates to
    except OSError:  # the reader says why it cannot be read (a pipe, a file too short to have a trailer)
        big = False
    if not big or not sys.stderr.isatty():
        return contextlib.nullcontext()
    from attnprof.report.progress import TraceProgress

    return TraceProgress(trace)


def cmd_list(args: argparse.Namespace) -> int:
    from attnprof import api

    listed = api.variants(args.device, args.kernel)
    _show(args, listed, lambda terminal, out: terminal.render_list(listed["variants"], listed["device"], out))
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from attnprof import api

    result = api.diff(args.a, args.b, args.region)
    _show(args, result, lambda terminal, out: terminal.render_diff(result, args.a, args.b, out))
    return 0


def _show(args: argparse.Namespace, result: dict, text_view) -> None:
    """`result` as JSON with `--json`, else through `text_view(terminal, console)`: report.terminal (and
    rich with it) is imported only for the text, so `--json` on a big trace holds no more than the result."""
    if args.json:
        from attnprof.report.json_view import render_json

        render_json(result)
        return
    from attnprof.report import terminal

    text_view(terminal, terminal.console())
