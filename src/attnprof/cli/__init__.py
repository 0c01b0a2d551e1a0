"""Command line: argparse subcommands bound to their handlers (`set_defaults(func=...)`).

Each subcommand module registers its parsers; heavy imports (torch, rich) stay inside the handlers,
so `attnprof --help` and `attnprof analyze` start without torch. A user error prints one line saying
what is wrong and exits 2 (no traceback unless --debug); SIGINT exits 130 after saying where the
finished results are.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from attnprof.cli import fix, history, profile, sweep
from attnprof.cli.args import EXIT_USAGE, Parser
from attnprof.cli.pipe import safe_stdout
from attnprof.errors import UserError
from attnprof.version import __version__

EXIT_INTERRUPTED = 130
TRACE_ONLY_COMMANDS = frozenset({"analyze", "diff", "report", "history", "compare"})


def set_blas_threads(command: str) -> None:
    """One BLAS thread for a command that only reads traces and results, unless the user set it. They do no
    linear algebra, but NumPy's OpenBLAS starts a thread per core at import, each spinning ~0.1 s (on 16
    cores: 1.9 s of CPU per `attnprof analyze` of an 8 MB trace, for nothing: docs/scaling.md). Called once
    the command is parsed, before its handler imports NumPy (the parser imports none); commands that run
    torch keep the default (torch may use OpenBLAS)."""
    if command in TRACE_ONLY_COMMANDS and "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def build_parser() -> Parser:
    parser = Parser(prog="attnprof", description="What every attention implementation does on the GPU.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--version", action="version", version=f"attnprof {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    for module in (profile, fix, sweep, history):
        module.register(sub)
    for subcommand in dict.fromkeys(sub.choices.values()):  # once per parser (an alias names one twice)
        # `attnprof run ... --debug` too; not given there, the top one holds
        subcommand.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # bare `attnprof`: what it can do, not an error line
        parser.print_help()
        return EXIT_USAGE
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the command the history records
    set_blas_threads(args.command)
    try:
        with safe_stdout():  # `| head`: the command finishes its files and keeps its own exit status
            return int(args.func(args) or 0)
    except KeyboardInterrupt as e:  # one message: where the finished results are, when the handler knows
        print(f"attnprof: interrupted; {e or 'finished results are kept'}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # noqa: BLE001 - the one place errors become exit codes
        if args.debug:
            raise
        return _report_error(e)


def command() -> NoReturn:
    """The `attnprof` command (and `python -m attnprof`): main(), then the process ends with its status."""
    finish(main())


def finish(status: int) -> NoReturn:
    """End the process with `status`. Once Dask distributed is imported (`analyze --cluster`), the interpreter's
    own teardown of its modules took 0.2-0.3 s after the result was printed (`python -c "import distributed"`
    against the same ending in os._exit: 0.92-1.20 s against 0.74-0.89 s on the 2-core VM), which the user
    waits for: the exit handlers run (logging's flush, temporary folders' finalizers, distributed's own), the
    standard streams are flushed, and the process ends there. A rank of a torchrun job ends so too: twice in
    CI (2026-12-07 and -08) a gloo rank whose results were written and whose process group was destroyed then
    aborted ("terminate called without an active exception", SIGABRT, not reproduced in 21 runs here), which
    torchrun reports as the whole job failing; the teardown of C++ objects that follows is skipped. Every file
    attnprof writes is closed by then."""
    from attnprof.api import is_rank

    if "distributed" in sys.modules or is_rank():
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed pipe (`| head`) has nothing left to take
                stream.flush()
        os._exit(status)
    sys.exit(status)


def run_and_finish(argv: list[str]) -> NoReturn:
    """main(argv), then finish(): the command line each rank of `attnprof run --nproc N` runs."""
    finish(main(argv))


def _report_error(e: Exception) -> int:
    from attnprof.report.text import printable

    if isinstance(e, OSError) and e.filename is not None:  # a path named on the command line: say which
        e = UserError(f"{e.filename}: {e.strerror or e}")
    message = printable(" ".join(str(e).split()) or type(e).__name__)  # paths and messages carry no escapes
    if isinstance(e, (UserError, ValueError, OSError)):  # OSError: a read-only folder, a full disk
        print(f"attnprof: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    print(f"attnprof: internal error: {type(e).__name__}: {message} (rerun with --debug for the traceback)",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
