"""`attnprof patch --verify` of the in-place plan: the patched file against the original, profiled side by
side (fix.verify, which both wings' verifications share)."""

from __future__ import annotations

from attnprof.fix import verify as before_and_after
from attnprof.fix.edits import Edit


def verify(spec: str, sources: dict[str, tuple[str, str]], device: str, grad: bool, planned: list[Edit]) -> dict:
    """The target before and after `sources` ({file: (old, new)}); `planned` as the rewrite to SDPA takes it."""
    return before_and_after.verify(spec, sources, device, grad)
