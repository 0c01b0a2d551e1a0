"""`lint` and `rewrite`: the user's own attention, its hidden costs found, then fixed in its source
(`patch` is the old name of `rewrite`, still accepted; `attnprof.patch(module)` is the run-time rewrite)."""

from __future__ import annotations

import argparse

from attnprof.cli.args import add_device
from attnprof.cli.history import add_history_args, remember

TARGET_HELP = "path/to/file.py:factory or package.module:factory; factory() -> (module, example_inputs)"


def register(sub) -> None:
    lint = sub.add_parser("lint", help="profile your forward and name the source line behind each cost")
    lint.add_argument("target", help=TARGET_HELP)
    lint.add_argument("--json", action="store_true")
    add_history_args(lint)
    patch = sub.add_parser("rewrite", aliases=["patch"],
                           help="rewrite safe out-of-place masked_fill in your source to in place (or --to-sdpa)")
    patch.add_argument("target", help=TARGET_HELP)
    mode = patch.add_mutually_exclusive_group()
    mode.add_argument("--diff", action="store_true", help="print the unified diff (the default)")
    mode.add_argument("--write", action="store_true", help="apply it, keeping the original as <file>.orig")
    patch.add_argument("--verify", action="store_true", help="profile before and after; outputs must match")
    add_history_args(patch)  # what --verify measured is recorded
    patch.add_argument("--to-sdpa", action="store_true",
                       help="rewrite hand-written attention (q @ kᵀ, mask, softmax, @ v) to one "
                            "F.scaled_dot_product_attention call, where it is provably the same")
    patch.add_argument("--strict", action="store_true",
                       help="with --to-sdpa: refuse a rewrite that loses autograd the original supports "
                            "(double backward, forward-mode AD)")
    for p, handler in ((lint, cmd_lint), (patch, cmd_rewrite)):
        add_device(p)
        p.add_argument("--grad", action="store_true", help="run with autograd on (default: torch.no_grad())")
        p.set_defaults(func=handler)


def cmd_lint(args: argparse.Namespace) -> int:
    from attnprof import api
    from attnprof.report.fix_views import render_lint
    from attnprof.report.json_view import render_json

    report = api.lint(args.target, device=args.device, grad=args.grad)
    if args.json:
        render_json(report)
    else:
        render_lint(report)
    remember(args, "lint", report)
    return 0


def cmd_rewrite(args: argparse.Namespace) -> int:
    from attnprof import api
    from attnprof.report.fix_views import (
        render_checked,
        render_patch_plan,
        render_sdpa_plan,
        render_unified_diff,
        render_verify,
        render_written,
    )

    rewritten = api.rewrite(args.target, to_sdpa=args.to_sdpa, device=args.device, grad=args.grad,
                            strict=args.strict)
    if args.to_sdpa:
        render_sdpa_plan(rewritten["plan"])
    else:
        render_patch_plan(rewritten["plan"])
    render_checked(rewritten["checked"])
    verified = api.verify_rewrite(rewritten) if args.verify else None  # before anything is written
    if args.write:
        render_written(api.write_rewrite(rewritten))
    else:
        render_unified_diff(rewritten["diff"])
    if verified is not None:
        render_verify(verified)
        remember(args, "verify", verified)  # what --verify measured is recorded
    return 0
