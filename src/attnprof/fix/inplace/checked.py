"""The in-place plan checked against the original (fix.checked): an edit that computes something else, on
the calls seen or a variation of them, is refused with what differed and writes nothing."""

from __future__ import annotations

from dataclasses import replace

from attnprof.fix import checked as against_original
from attnprof.fix.edits import Edit


def checked(spec: str, edits: list[Edit], device: str, strict: bool = False) -> tuple[list[Edit], dict, dict]:
    """(the edits, each that computes something else refused with what differed; {file: (old, new)} of those
    that passed; the verdict on them). `strict`: as the rewrite to SDPA takes it; an in-place fill loses no
    autograd the original supports, so the check is the same."""
    return against_original.checked(spec, edits, device, lambda e: [e],
                                    lambda e, why: replace(e, safe=False, reason=why), strict)
