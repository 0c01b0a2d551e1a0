"""Command line: thin argparse handlers that call the library. Heavy imports stay inside handlers.

A user error prints one line saying what is wrong and exits 2 (no traceback unless --debug);
SIGINT exits 130 after saying where the finished results are.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

EXIT_USAGE, EXIT_INTERRUPTED = 2, 130


class UserError(Exception):
    """Bad input from the user: reported in one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage block
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def int_list(text: str) -> list[int]:
    """`512,1024,2048` -> [512, 1024, 2048], each a positive integer."""
    parts = [p.strip() for p in text.split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of integers, got {text!r}")
    return [positive_int(p) for p in parts]


def schedule(text: str) -> tuple[int, int, int]:
    """`1,1,3` -> (wait, warmup, active); active must be at least 1."""
    parts = text.split(",")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"expected WAIT,WARMUP,ACTIVE, got {text!r}")
    try:
        wait, warm, active = (int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected three integers, got {text!r}") from None
    if min(wait, warm) < 0 or active < 1:
        raise argparse.ArgumentTypeError(f"wait and warmup must be >= 0 and active >= 1, got {text!r}")
    return wait, warm, active


def name_list(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected a comma-separated list of names")
    return names


def add_problem_args(p: argparse.ArgumentParser, as_lists: bool = False) -> None:
    kind = int_list if as_lists else positive_int
    for flag in ("--batch", "--heads", "--seq", "--head-dim"):
        p.add_argument(flag, type=kind, default=None, help="default: the article's problem on GPU, smaller on CPU")
    p.add_argument("--dtype", default="bf16", type=name_list if as_lists else str,
                   help="bf16, fp16 or fp32" + (" (comma-separated)" if as_lists else ""))
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    p.add_argument("--variants", type=name_list, default=None, help="comma-separated; default: all")
    p.add_argument("--compile", action="store_true", help="wrap each variant in torch.compile (<name>+compile)")
    p.add_argument("--kernel", default=None, help="hub variant: a hub repo id or a local kernel directory")
    p.add_argument("--out", default="attnprof-out", help="results go to a new folder under this one")
    p.add_argument("--repeats", type=positive_int, default=30, help="timed repeats per variant")
    p.add_argument("--no-graph", action="store_true", help="time device work back to back, not by graph replay")
    p.add_argument("--rotate-inputs", type=positive_int, default=1, metavar="N",
                   help="time N copies of q, k, v in turn so inputs are not L2-resident (1: off)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="attnprof", description="What every attention implementation does on the GPU.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="profile attention variants side by side")
    add_problem_args(run)
    run.add_argument("--json", action="store_true", help="print results.json instead of tables")
    run.add_argument("--target", default=None, help="your module too: file.py:factory or pkg.mod:factory")
    run.add_argument("--no-report", action="store_true", help="skip report.html in the run folder")
    run.add_argument("--warmup", type=positive_int, default=3, help="untimed calls before timing (default 3)")
    run.add_argument("--schedule", type=schedule, default=(1, 1, 3), metavar="WAIT,WARMUP,ACTIVE",
                     help="torch.profiler schedule in steps, one forward a step (default 1,1,3, the article's)")
    run.add_argument("--region", default="attn_fwd", help="record_function name around each forward")
    run.set_defaults(handler="attnprof.commands:cmd_run")

    analyze = sub.add_parser("analyze", help="attribute a torch.profiler trace's GPU work to its regions")
    analyze.add_argument("trace")
    analyze.add_argument("--region", default=None, help="default: the most frequent record_function name")
    analyze.add_argument("--json", action="store_true")
    analyze.add_argument("--max-bytes", type=positive_int, default=None, help="cap on the decompressed size")
    analyze.add_argument("--html", default=None, metavar="FILE", help="also write the HTML report to FILE")
    analyze.set_defaults(handler="attnprof.commands:cmd_analyze")

    lst = sub.add_parser("list", help="the variants and whether each can run here")
    lst.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(handler="attnprof.commands:cmd_list")

    diff = sub.add_parser("diff", help="compare two traces or two run results")
    diff.add_argument("a")
    diff.add_argument("b")
    diff.add_argument("--region", default=None)
    diff.add_argument("--json", action="store_true")
    diff.set_defaults(handler="attnprof.commands:cmd_diff")

    add_fix_commands(sub)
    add_report_commands(sub)
    return parser


def add_report_commands(sub) -> None:
    """`sweep`: the variants over a grid of problems; `report`: the HTML page of a run or sweep folder."""
    sweep = sub.add_parser("sweep", help="run the variants over lists of sizes (every combination)")
    add_problem_args(sweep, as_lists=True)
    sweep.add_argument("--profile", action="store_true", help="also profile each point (traces; slower)")
    sweep.add_argument("--resume", default=None, metavar="DIR", help="continue an interrupted sweep in DIR")
    sweep.add_argument("--no-report", action="store_true", help="skip report.html in the sweep folder")
    sweep.add_argument("--json", action="store_true", help="print the lines and fitted exponents as JSON")
    sweep.set_defaults(handler="attnprof.commands_report:cmd_sweep")

    report = sub.add_parser("report", help="write report.html for a run or sweep folder")
    report.add_argument("folder")
    report.set_defaults(handler="attnprof.commands_report:cmd_report")


def add_fix_commands(sub) -> None:
    """`lint` and `patch`: find and fix hidden costs in the user's own attention (a target)."""
    target_help = "path/to/file.py:factory or package.module:factory; factory() -> (module, example_inputs)"
    lint = sub.add_parser("lint", help="profile your forward and name the source line behind each cost")
    lint.add_argument("target", help=target_help)
    lint.add_argument("--json", action="store_true")
    patch = sub.add_parser("patch", help="rewrite safe out-of-place masked_fill in your source to in place")
    patch.add_argument("target", help=target_help)
    mode = patch.add_mutually_exclusive_group()
    mode.add_argument("--diff", action="store_true", help="print the unified diff (the default)")
    mode.add_argument("--write", action="store_true", help="apply it, keeping the original as <file>.orig")
    patch.add_argument("--verify", action="store_true", help="profile before and after; outputs must match")
    for p, handler in ((lint, "cmd_lint"), (patch, "cmd_patch")):
        p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
        p.add_argument("--grad", action="store_true", help="run with autograd on (default: torch.no_grad())")
        p.set_defaults(handler=f"attnprof.commands_fix:{handler}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    module_name, func_name = args.handler.split(":")
    try:
        import importlib

        handler = getattr(importlib.import_module(module_name), func_name)
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        print("attnprof: interrupted; finished results are kept", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # noqa: BLE001 - the one place errors become exit codes
        if args.debug:
            raise
        return _report_error(e)


def _report_error(e: Exception) -> int:
    from .trace import TraceError
    from .variants import UnknownVariant

    message = " ".join(str(e).split()) or type(e).__name__
    if isinstance(e, (UserError, TraceError, UnknownVariant, ValueError, FileNotFoundError)):
        print(f"attnprof: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    print(f"attnprof: internal error: {type(e).__name__}: {message} (rerun with --debug for the traceback)",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
