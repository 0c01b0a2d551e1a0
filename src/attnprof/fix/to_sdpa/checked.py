"""The to-SDPA plan checked against the original (fix.checked): a rewrite that computes something else,
on the calls seen or a variation of them, is refused with what differed and writes no call."""

from __future__ import annotations

from dataclasses import replace

from attnprof.fix import checked as against_original
from attnprof.fix.to_sdpa.plan import Rewrite


def checked(spec: str, rewrites: list[Rewrite], device: str, strict: bool = False
            ) -> tuple[list[Rewrite], dict, dict]:
    """(the rewrites, each that failed its check refused; {file: (old, new)} of those that passed; the
    verdict on them). `strict` refuses a rewrite that loses autograd the original supports."""
    return against_original.checked(spec, rewrites, device, lambda r: r.edits,
                                    lambda r, why: replace(r, safe=False, edits=[], call="", reason=why), strict)
