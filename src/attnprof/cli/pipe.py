"""stdout into a pipe that closes early (`attnprof list --json | head`): the command goes on, quietly.

When the reader goes away, a write raises BrokenPipeError. Left alone it ends the command half-way
(no `--html` file written after the table) with a traceback or `[Errno 32] Broken pipe`, and exit 1,
which a CI gate reads as "regressed". `safe_stdout` lets the command finish: from the first broken
write on, stdout's file descriptor points at /dev/null (so Python's own flush at exit is quiet too)
and the rest of the output is dropped; the exit status stays the command's own.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


class _PipeSafe:
    """A text stream that forwards to `stream` until a write finds the pipe closed, then drops writes."""

    def __init__(self, stream):
        self._stream, self.broken = stream, False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._drop()

    def _drop(self) -> None:
        self.broken = True
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def __getattr__(self, name: str):  # isatty, fileno, encoding...: the stream's own
        return getattr(self._stream, name)


@contextlib.contextmanager
def safe_stdout() -> Iterator[None]:
    saved = sys.stdout
    if saved is None or isinstance(saved, _PipeSafe):
        yield
        return
    sys.stdout = _PipeSafe(saved)
    try:
        yield
    finally:
        with contextlib.suppress(BrokenPipeError):
            sys.stdout.flush()
        sys.stdout = saved
