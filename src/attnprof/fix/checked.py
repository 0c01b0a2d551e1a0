"""A plan's rewrites checked against the original (fix.differential) before any is shown as safe, for
both wings (in place, to SDPA): one that computes something else, on the calls seen or a variation of
them, becomes a refusal with what differed, and the others are checked again without it. A wing's
static proof decides what is planned; this is the second gate, and only what passes both is written."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from attnprof.fix.differential import RewriteDiffers, check
from attnprof.fix.edits import Edit, patched_sources


class Planned(Protocol):
    safe: bool


P = TypeVar("P", bound=Planned)


def checked(spec: str, planned: list[P], device: str, edits_of: Callable[[P], list[Edit]],
            refuse: Callable[[P, str], P], strict: bool = False) -> tuple[list[P], dict, dict]:
    """(the plan, each rewrite that failed its check refused by `refuse(rewrite, why)`; {file: (old, new)}
    of those that passed; the verdict on them, fix.differential's). `edits_of` gives a rewrite's edits to
    the source; `strict` refuses a rewrite that loses autograd the original supports."""
    def sources_and_cases(chosen: list[P]) -> tuple[dict, dict]:
        sources = patched_sources([e for r in chosen for e in edits_of(r)])
        return sources, check(spec, sources, device, strict)

    def refused(plan: list[P], why: dict[int, str]) -> list[P]:
        return [refuse(r, f"checked against the original: {why[id(r)]}") if id(r) in why else r for r in plan]

    safe = [r for r in planned if r.safe]
    try:
        return planned, *sources_and_cases(safe)
    except RewriteDiffers as together:
        if len(safe) == 1:
            return refused(planned, {id(safe[0]): str(together)}), {}, {}
        failed = {}
        for r in safe:
            try:
                sources_and_cases([r])
            except RewriteDiffers as alone:
                failed[id(r)] = str(alone)
        failed = failed or {id(r): str(together) for r in safe}  # only their combination differs
    planned = refused(planned, failed)
    try:
        return planned, *sources_and_cases([r for r in planned if r.safe])
    except RewriteDiffers as rest:
        return refused(planned, {id(r): str(rest) for r in planned if r.safe}), {}, {}
