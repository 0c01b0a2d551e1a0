"""Handlers of `attnprof lint` and `attnprof patch`: the user's own attention, found and fixed."""

from __future__ import annotations

import argparse
import json


def cmd_lint(args: argparse.Namespace) -> int:
    from .api import lint
    from .linter import render

    report = lint(args.target, args.device, args.grad)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render(report)
    return 0


def cmd_patch(args: argparse.Namespace) -> int:
    from . import patch_source as patch
    from .linter import shown
    from .runner import resolve_device
    from .target import load_target

    target = load_target(args.target)  # a bad target fails first, before torch looks for a device
    device = resolve_device(args.device)
    target = target.to(device)
    edits = patch.plan(target, args.grad)
    for e in edits:
        verb = "rewrite" if e.safe else "left alone"
        print(f"{shown(e.file)}:{e.line}  {e.code}\n  {verb}: {e.reason}")
    if not edits:
        print("no out-of-place masked_fill ran in your code: nothing to patch")
    sources = patch.patched_sources(edits)
    if args.write:
        for path in patch.write(sources):
            print(f"wrote {shown(str(path))} (original kept as {shown(str(path))}.orig)")
    else:
        print(patch.unified_diff(sources), end="")
    if args.verify:
        from .patch_verify import render, verify

        render(verify(args.target, sources, device, args.grad))
    return 0
