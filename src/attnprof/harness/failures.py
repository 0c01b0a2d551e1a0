"""What a variant's failure was, in one status and one line: out of memory, unsupported (with the reason torch's
warnings gave when a pinned backend refused), or an error. A failing variant is recorded and the run goes on."""

from __future__ import annotations

import re

TRIGGERED = re.compile(r"\(Triggered internally at [^)]*\)")
CPU_OOM = re.compile(r"can't allocate memory: you tried to allocate (\d+) bytes")


class Failure(Exception):
    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


def classify(e: Exception, caught: list) -> dict:
    """Turn an exception from a variant into a status and a one-line reason."""
    import torch

    text = " ".join(str(e).split())
    hints = "; ".join(dict.fromkeys(filter(None, (why(str(w.message)) for w in caught))))
    if isinstance(e, (torch.cuda.OutOfMemoryError, MemoryError)) or "out of memory" in text.lower():
        return {"status": "oom", "reason": (text or "out of memory (MemoryError)")[:300]}
    asked = CPU_OOM.search(text)  # the CPU allocator says it in its own words
    if asked:
        return {"status": "oom", "reason": f"CPU out of memory: tried to allocate {int(asked[1]) / 2**30:.2f} GiB"}
    if "No available kernel" in text or "No viable backend" in text:
        return {"status": "unsupported", "reason": (hints or text)[:600]}
    return {"status": "error", "reason": f"{type(e).__name__}: {text}"[:600]}


def why(message: str) -> str | None:
    """The substance of a warning torch gave when a pinned backend refused: drop the
    '(Triggered internally at file:line.)' tails and the headers that only say which
    other backends the pin turned off."""
    text = " ".join(TRIGGERED.sub("", message).split())
    if not text or text.endswith("because:") or text.endswith("runtime disabled."):
        return None
    return text
