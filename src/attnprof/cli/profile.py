"""`run`, `analyze`, `list` and `diff`: profile variants, read a trace, list variants, compare two results.

Handlers parse nothing and draw nothing: they call the library, then a view in report/."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from attnprof.cli.args import add_device, add_problem_args, positive_int, schedule
from attnprof.cli.distributed import add_analyze_args, add_run_args, several_traces, wants_ranks
from attnprof.cli.history import add_history_args, command_line, remember
from attnprof.errors import UserError
from attnprof.harness import defaults

_SCHEDULE = ",".join(map(str, defaults.SCHEDULE))


def register(sub) -> None:
    run = sub.add_parser("run", help="profile attention variants side by side")
    add_problem_args(run)
    run.add_argument("--json", action="store_true", help="print results.json instead of tables")
    run.add_argument("--target", default=None, help="your module too: file.py:factory or pkg.mod:factory")
    run.add_argument("--no-report", action="store_true", help="skip report.html in the run folder")
    run.add_argument("--warmup", type=positive_int, default=defaults.WARMUP,
                     help=f"untimed calls before timing (default {defaults.WARMUP})")
    run.add_argument("--schedule", type=schedule, default=defaults.SCHEDULE, metavar="WAIT,WARMUP,ACTIVE",
                     help=f"torch.profiler schedule in steps, one forward a step (default {_SCHEDULE}, the article's)")
    run.add_argument("--region", default=None,
                     help=f"record_function name around each call (default {defaults.REGION}; "
                          f"{defaults.STEP_REGION} in train mode)")
    run.add_argument("--ncu", action="store_true",
                     help="also profile each variant's kernels with Nsight Compute (ncu on PATH): achieved "
                          "occupancy, SM/DRAM throughput, tensor pipe, limiter")
    add_history_args(run)
    add_run_args(run)
    run.set_defaults(func=cmd_run)

    analyze = sub.add_parser("analyze", help="attribute a torch.profiler trace's GPU work to its regions")
    analyze.add_argument("trace", nargs="+", help="a trace; several ranks' traces, or a folder of them")
    add_analyze_args(analyze)
    analyze.add_argument("--region", default=None, help="default: the most frequent record_function name")
    analyze.add_argument("--json", action="store_true")
    analyze.add_argument("--max-bytes", type=positive_int, default=None, help="cap on the decompressed size")
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
    if wants_ranks(args):
        from attnprof.cli.distributed import cmd_run_ranks

        return cmd_run_ranks(args)
    from attnprof import api
    from attnprof.history import records
    from attnprof.report import terminal

    console = terminal.console()
    note = None if args.json else _cpu_default_used(args)  # shown once the run has started, not before an error
    with terminal.RunProgress(console, quiet=args.json, cpu_default=note) as progress:
        try:
            results = api.run(
                args.variants, batch=args.batch, heads=args.heads, seq=args.seq, head_dim=args.head_dim,
                dtype=args.dtype, device=args.device, compile=args.compile, kernel=args.kernel,
                out=args.out, repeats=args.repeats, graph=not args.no_graph,
                listener=progress.update, target=args.target, warmup=args.warmup, schedule=args.schedule,
                region=args.region, rotate_inputs=args.rotate_inputs, threads=args.threads, mode=args.mode,
                kv_heads=args.kv_heads,
                mask=args.mask, dense_mask=args.dense_mask, q_len=args.q_len,
                ncu=args.ncu,
            )
        except KeyboardInterrupt:  # main prints the one message
            if progress.run_dir:
                raise KeyboardInterrupt(f"finished variants are in {progress.run_dir}") from None
            raise
    if args.json:
        terminal.render_json(results)
    else:
        terminal.render_run(results, console)
    if args.ncu:
        from attnprof.report.ncu import render_ncu

        render_ncu(results, console, table=not args.json)
    remember(args, lambda env: records.from_run(results, command_line(args), env))
    if not args.no_report:
        from attnprof.report.html import write_report

        print(f"attnprof: report {write_report(results['run_dir'])}", file=sys.stderr)
    return 0


def _cpu_default_used(args: argparse.Namespace) -> dict | None:
    """The smaller CPU problem, when no GPU is used and the user gave no size; else None."""
    from attnprof.api import default_problem
    from attnprof.harness.runner import resolve_device

    device = resolve_device(args.device)
    problem, shrunk = default_problem(device, batch=args.batch, heads=args.heads, seq=args.seq,
                                      head_dim=args.head_dim, dtype=args.dtype)
    return problem.as_dict() if shrunk else None


def cmd_analyze(args: argparse.Namespace) -> int:
    from attnprof.api import analyze
    from attnprof.report import terminal
    from attnprof.report.text import printable
    from attnprof.trace.reader import DEFAULT_MAX_BYTES

    if args.html:
        from attnprof.files import not_an_input

        not_an_input(args.html, args.trace)  # `--html t.json` would replace the trace it reads
    if several_traces(args.trace):
        from attnprof.cli.distributed import cmd_analyze_ranks

        return cmd_analyze_ranks(args)
    trace = args.trace[0]
    result = analyze(trace, args.region, args.max_bytes or DEFAULT_MAX_BYTES)
    for warning in result["warnings"]:
        print(f"attnprof: warning: {printable(warning)}", file=sys.stderr)
    if args.json:
        terminal.render_json(result)
    else:
        terminal.render_analysis(result, terminal.console())
    if args.html:
        from attnprof.report.html import write_analysis_report

        print(f"attnprof: report {write_analysis_report(result, trace, args.html)}", file=sys.stderr)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from attnprof import variants as registry
    from attnprof.api import default_problem
    from attnprof.harness.runner import resolve_device
    from attnprof.report import terminal

    device = resolve_device(args.device)
    problem, _ = default_problem(device)
    rows = []
    for name, variant in registry.REGISTRY.items():
        reason = registry.why_not(variant, problem, device, args.kernel)
        loads = variant.source(args.kernel) if variant.source and args.kernel else None  # the kernel named
        rows.append({"name": name, "family": variant.family, "layout": variant.layout,
                     "description": f"{variant.description}; {loads}" if loads else variant.description,
                     "runs_here": reason is None, "reason": reason})
    if args.json:
        terminal.render_json({"device": device, "variants": rows})
    else:
        terminal.render_list(rows, device, terminal.console())
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from attnprof.analysis.diff import diff
    from attnprof.report import terminal

    result = diff(_load_side(args.a, args.region), _load_side(args.b, args.region))
    if args.json:
        terminal.render_json(result)
    else:
        terminal.render_diff(result, args.a, args.b, terminal.console())
    return 0


def _load_side(spec: str, region: str | None) -> dict:
    """A trace file, or `results.json:VARIANT` / `RUN_DIR:VARIANT` for one variant of a run."""
    from attnprof.api import analyze

    path, _, variant = spec.rpartition(":") if ":" in spec and not Path(spec).exists() else (spec, "", "")
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    if path.name.endswith("results.json") or variant:
        return _variant_of_run(path, variant)
    return analyze(path, region)


def _variant_of_run(path: Path, variant: str) -> dict:
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: cannot read run results ({e})") from None
    found = {v.get("name"): v for v in results.get("variants", []) if isinstance(v, dict)}
    if variant not in found:
        raise UserError(f"{path}: no variant {variant!r}; it has {', '.join(found) or 'none'}")
    record = found[variant]
    if record.get("status") != "ok":
        raise UserError(f"{path}: variant {variant!r} did not run ({record.get('reason')})")
    return {"source": f"{path}:{variant}", **record}
