"""The plan's rewrites checked against the original (fix.differential) before any is shown as safe:
one that computes something else, on the calls seen or a variation of them, becomes a refusal with
what differed, and the others are checked again without it."""

from __future__ import annotations

from dataclasses import replace

from attnprof.fix.differential import RewriteDiffers, check
from attnprof.fix.edits import patched_sources
from attnprof.fix.to_sdpa.rewrite import Rewrite


def checked(spec: str, rewrites: list[Rewrite], device: str) -> tuple[list[Rewrite], dict, list[str]]:
    """(the rewrites, each that failed its check refused; {file: (old, new)} of those that passed; the
    cases they passed)."""
    safe = [r for r in rewrites if r.safe]
    try:
        return rewrites, *_sources_and_cases(spec, safe, device)
    except RewriteDiffers as together:
        if len(safe) == 1:
            return _refused(rewrites, {id(safe[0]): str(together)}), {}, []
        failed = {}
        for r in safe:
            try:
                _sources_and_cases(spec, [r], device)
            except RewriteDiffers as alone:
                failed[id(r)] = str(alone)
        failed = failed or {id(r): str(together) for r in safe}  # only their combination differs
    rewrites = _refused(rewrites, failed)
    try:
        return rewrites, *_sources_and_cases(spec, [r for r in rewrites if r.safe], device)
    except RewriteDiffers as rest:
        return _refused(rewrites, {id(r): str(rest) for r in rewrites if r.safe}), {}, []


def _sources_and_cases(spec: str, rewrites: list[Rewrite], device: str) -> tuple[dict, list[str]]:
    sources = patched_sources([e for r in rewrites for e in r.edits])
    return sources, check(spec, sources, device)


def _refused(rewrites: list[Rewrite], why: dict[int, str]) -> list[Rewrite]:
    return [replace(r, safe=False, edits=[], call="", reason=f"checked against the original: {why[id(r)]}")
            if id(r) in why else r for r in rewrites]
