"""Where a trace's bytes come from: a file, gzipped or not, or a pipe (`<(zcat t.json.gz)`, /dev/stdin, a
named pipe) read once, in blocks, never past a size cap. Every way this can fail is a one-line TraceError."""

from __future__ import annotations

import gzip
import os
import select
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from attnprof.errors import UserError

# what a gzip may inflate to, or a pipe or a file read whole may hold, unless --max-bytes says otherwise: a
# gzip bomb or an endless pipe stops here; a plain file read in pieces is not capped (it holds its columns,
# not its bytes, and its size is on disk: a 5 GB trace of a real job is read, not refused)
DEFAULT_MAX_BYTES = 4 << 30
_BLOCK = 1 << 18  # streaming read size; bounds the raw JSON and the decoded structs held at once
_GZIP_MAGIC = b"\x1f\x8b"
PIPE_WAIT_S = float(os.environ.get("ATTNPROF_PIPE_WAIT_S", "10"))  # a named pipe's writer must show up by then


class TraceError(UserError):
    """The file is not a usable torch.profiler trace; the message is one line for the user."""


def blocks(path: Path, max_bytes: int | None, whole: bool = False) -> Iterator[bytes]:
    """The file's bytes in blocks, gunzipped when it is gzip, never more than `max_bytes`. None: a gzip's, a
    pipe's and those of a file to be held `whole` at most DEFAULT_MAX_BYTES, a plain file's read in pieces
    all of them."""
    try:
        with _open(path) as f:
            head = f.read(2)
            gz = head == _GZIP_MAGIC
            if not gz and path.name.endswith(".gz"):
                raise TraceError(f"{path}: named .gz but is not gzip data")
            stream = gzip.GzipFile(fileobj=_Prefixed(head, f)) if gz else _Prefixed(head, f)
            cap = _cap(max_bytes, gz or whole or not regular_file(path))
            total = 0
            while block := stream.read(_BLOCK):
                if gz and total == 0 and block.startswith(_GZIP_MAGIC):
                    raise TraceError(f"{path}: a gzip inside a gzip; gunzip it once, then read the result")
                total += len(block)
                if total > cap:
                    raise TraceError(f"{path}: {_over_cap(gz, cap, max_bytes is None)}")
                yield block
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise TraceError(f"{path}: broken or truncated gzip ({first_line(e)})") from None
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror or e}") from None


def _cap(max_bytes: int | None, bounded: bool) -> float:
    """The most bytes to read: `max_bytes` when given, else DEFAULT_MAX_BYTES where what is read is
    `bounded` (inflated, piped or held whole), else no limit."""
    if max_bytes is not None:
        return max_bytes
    return DEFAULT_MAX_BYTES if bounded else float("inf")


def _over_cap(gz: bool, cap: float, default: bool) -> str:
    """Why a trace was refused at `cap` bytes (the `default` cap, or the user's), and what to do."""
    if not default:
        return f"{'decompresses to' if gz else 'is'} more than --max-bytes ({cap} bytes)"
    if gz:
        return (f"decompresses to more than --max-bytes ({cap} bytes, the default for a gzip); for a trace that "
                "big, gunzip it (a plain file is read in pieces, whatever its size) or give a larger --max-bytes")
    return f"is more than --max-bytes ({cap} bytes, what a pipe or a file read whole may hold)"


def gzipped(path: Path) -> bool:
    """Whether the file starts as gzip data does (False when it cannot be read: `blocks` says why)."""
    try:
        with open(path, "rb") as f:
            return f.read(2) == _GZIP_MAGIC
    except OSError:
        return False


def json_size(path: Path) -> int:
    """About how many bytes of JSON the file holds: its size, or a gzip's inflated size as its trailer gives it
    (modulo 4 GiB, of its last member only: a guess for choosing how to show the reading, never a limit); 0
    for a pipe, which can be read only once."""
    if not regular_file(path):
        return 0
    if not gzipped(path):
        return os.stat(path).st_size  # (raises what makes the file unreadable)
    with open(path, "rb") as f:
        f.seek(-4, os.SEEK_END)
        return int.from_bytes(f.read(4), "little")


def regular_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return True  # `_blocks` says why it cannot be read


def _open(path: Path) -> BinaryIO:
    """The file for reading; a named pipe only once its writer shows up (a pipe nobody writes would
    block the open forever), a terminal never (a trace is not typed in)."""
    mode = os.stat(path).st_mode
    if stat.S_ISCHR(mode) and _is_terminal(path):
        raise TraceError(f"{path}: a terminal, not a trace; pipe one in or name the file")
    if not stat.S_ISFIFO(mode):
        return open(path, "rb")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    poll = select.poll()
    poll.register(fd, select.POLLIN | select.POLLHUP)
    if not poll.poll(PIPE_WAIT_S * 1000):
        os.close(fd)
        raise TraceError(f"{path}: a pipe that nothing wrote to in {PIPE_WAIT_S:g} s; start its writer first")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _is_terminal(path: Path) -> bool:
    fd = os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        return os.isatty(fd)
    finally:
        os.close(fd)


class _Prefixed:
    """A stream whose first bytes were read already: a pipe cannot seek back to them."""

    def __init__(self, head: bytes, rest: BinaryIO):
        self._head, self._rest = head, rest

    def read(self, n: int = -1) -> bytes:
        if not self._head:
            return self._rest.read(n)
        if n is None or n < 0:
            out, self._head = self._head + self._rest.read(), b""
            return out
        out, self._head = self._head[:n], self._head[n:]
        return out + (self._rest.read(n - len(out)) if n > len(out) else b"")


def first_line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__
