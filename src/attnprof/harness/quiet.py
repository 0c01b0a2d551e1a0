"""Keep torch's own noise from the user while the profiler runs.

kineto (the profiler's C++ side) writes `USDT:<time> <pid>:<tid> ...cpp:52] profiler_start` (and
`profiler_stop`) to file descriptor 2 at every start and stop, below Python's sys.stderr, so no
Python setting silences them; they break the progress display. `quiet_stderr` points fd 2 at a pipe
while the profiler runs and a thread passes everything written there on to the real stderr, as it
comes, less those lines. torch.profiler's "Profiler clears events at the end of each cycle" warning
(about its own defaults, not the user's code) is filtered by message.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import warnings
from collections.abc import Iterator

# a whole line only: kineto may write the line and its end apart, and the end alone must go too
NOISE = re.compile(rb"USDT:[^\n]*\] profiler_(?:start|stop)[^\n]*\n")
LAST_NOISE = re.compile(rb"USDT:[^\n]*\] profiler_(?:start|stop)[^\n]*$")  # cut off at the end of the stream
CLEARS_EVENTS = "Warning: Profiler clears events at the end of each cycle"


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=re.escape(CLEARS_EVENTS))
        try:
            saved = os.dup(2)
        except OSError:  # no fd 2 at all: nothing to filter
            yield
            return
        read_end, write_end = os.pipe()
        sys.stderr.flush()
        os.dup2(write_end, 2)
        os.close(write_end)
        relay = threading.Thread(target=_relay, args=(read_end, saved), daemon=True)
        relay.start()
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)  # closes the pipe's last write end: the relay sees end of file
            relay.join(timeout=5)
            os.close(saved)


def _relay(read_end: int, out: int) -> None:
    """Copy the pipe to `out` less the noise; a piece that may be the start of a noise line waits for
    its end of line."""
    pending = b""
    with os.fdopen(read_end, "rb", buffering=0) as pipe:
        while chunk := pipe.read(65536):
            pending = NOISE.sub(b"", pending + chunk)
            cut = pending.rfind(b"USDT:")
            hold = cut >= 0 and b"\n" not in pending[cut:]
            ready, pending = (pending[:cut], pending[cut:]) if hold else (pending, b"")
            _write_all(out, ready)
    _write_all(out, LAST_NOISE.sub(b"", NOISE.sub(b"", pending)))


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]
