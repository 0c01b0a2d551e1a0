"""`lint` and `patch`: the user's own attention, its hidden costs found and fixed."""

from __future__ import annotations

import argparse

from attnprof.cli.args import add_device
from attnprof.cli.history import add_history_args, command_line, remember

TARGET_HELP = "path/to/file.py:factory or package.module:factory; factory() -> (module, example_inputs)"


def register(sub) -> None:
    lint = sub.add_parser("lint", help="profile your forward and name the source line behind each cost")
    lint.add_argument("target", help=TARGET_HELP)
    lint.add_argument("--json", action="store_true")
    add_history_args(lint)
    patch = sub.add_parser("patch", help="rewrite safe out-of-place masked_fill in your source to in place")
    patch.add_argument("target", help=TARGET_HELP)
    mode = patch.add_mutually_exclusive_group()
    mode.add_argument("--diff", action="store_true", help="print the unified diff (the default)")
    mode.add_argument("--write", action="store_true", help="apply it, keeping the original as <file>.orig")
    patch.add_argument("--verify", action="store_true", help="profile before and after; outputs must match")
    add_history_args(patch)  # what --verify measured is recorded
    patch.add_argument("--to-sdpa", action="store_true",
                       help="rewrite hand-written attention (q @ kᵀ, mask, softmax, @ v) to one "
                            "F.scaled_dot_product_attention call, where it is provably the same")
    for p, handler in ((lint, cmd_lint), (patch, cmd_patch)):
        add_device(p)
        p.add_argument("--grad", action="store_true", help="run with autograd on (default: torch.no_grad())")
        p.set_defaults(func=handler)


def cmd_lint(args: argparse.Namespace) -> int:
    from attnprof.api import lint
    from attnprof.history import records
    from attnprof.report.fix_views import render_lint
    from attnprof.report.terminal import render_json

    report = lint(args.target, device=args.device, grad=args.grad)
    if args.json:
        render_json(report)
    else:
        render_lint(report)
    remember(args, lambda env: records.from_lint(report, command_line(args), env))
    return 0


def cmd_patch(args: argparse.Namespace) -> int:
    from attnprof.fix import edits
    from attnprof.fix.inplace import source as inplace
    from attnprof.fix.target import load_target
    from attnprof.harness.runner import resolve_device
    from attnprof.report.fix_views import render_patch_plan

    target = load_target(args.target)  # a bad target fails first, before torch looks for a device
    device = resolve_device(args.device)
    target = target.to(device)
    if args.to_sdpa:
        return _patch_to_sdpa(args, target, device)
    planned = inplace.plan(target, args.grad)
    render_patch_plan(planned)
    sources = edits.patched_sources(planned)
    if args.verify:
        from attnprof.fix.verify import checked_first, verify

        result = checked_first(lambda: verify(args.target, sources, device, args.grad))
    _write_or_diff(args, sources)
    if args.verify:
        _verified(args, result)
    return 0


def _patch_to_sdpa(args: argparse.Namespace, target, device: str) -> int:
    from attnprof.fix.to_sdpa import checked as sdpa_checked
    from attnprof.fix.to_sdpa import rewrite as to_sdpa
    from attnprof.fix.to_sdpa import verify as sdpa_verify
    from attnprof.fix.verify import checked_first
    from attnprof.report.fix_views import render_checked, render_sdpa_plan

    rewrites, sources, cases = sdpa_checked.checked(args.target, to_sdpa.plan(target, args.grad), device)
    render_sdpa_plan(rewrites)
    render_checked(cases)
    library = not sources and any(r.reason == to_sdpa.LIBRARY for r in rewrites)
    if args.verify and library:
        result = checked_first(lambda: sdpa_verify.verify_configured(args.target, device, args.grad))
    elif args.verify:
        result = checked_first(lambda: sdpa_verify.verify_rewrite(args.target, sources, device, args.grad))
    _write_or_diff(args, sources)
    if args.verify:
        _verified(args, result)
    return 0


def _write_or_diff(args: argparse.Namespace, sources: dict) -> None:
    from attnprof.fix import edits
    from attnprof.fix.source_io import write
    from attnprof.report.fix_views import render_unified_diff, render_written

    if args.write:
        render_written(write(sources))
    else:
        render_unified_diff(edits.unified_diff(sources))


def _verified(args: argparse.Namespace, result: dict) -> None:
    """Show what --verify proved, and record it in the run history."""
    from attnprof.history import records
    from attnprof.report.fix_views import render_verify

    render_verify(result)
    remember(args, lambda env: records.from_verify(result, command_line(args), env))
