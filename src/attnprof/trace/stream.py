"""Cut the `traceEvents` array of a Chrome trace into pieces as its bytes arrive.

The pieces are whole events, so that a decoder can take them one at a time and the raw
JSON is never held whole. The cuts are guesses (the last `},` before a `{` in what has
arrived), and a guess is never trusted: a cut inside a string or a nested value leaves
a piece that is not a JSON array, which its decoder reports as `Unstreamable`, and the
document around the array must still parse once the array is emptied. When a guess
fails the caller reads the file whole, so cutting never changes what is read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from attnprof.trace.wire import DECODE_ERRORS

_HEAD_LIMIT = 1 << 20  # the events array must open within this, else read the file whole
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_MARKER = b"attnprof: the events array was here"
_BARE_LIST = re.compile(rb"\s*\[")  # some tools write the events as a top-level list


class Unstreamable(Exception):
    """The cuts cannot be vouched for; read the file whole instead."""


def read_event_array(blocks: Iterator[bytes], on_piece: Callable[[bytes], None]) -> dict[str, Any]:
    """Feed the events array to `on_piece` in pieces, each a JSON array of whole events (a `[`, the
    bytes between two cuts, a `]`); return the document around the array (with `traceEvents` empty)."""
    head, rest = _split_head(blocks)
    for block in blocks:
        rest = _drain(rest, block, on_piece)
    return _finish(head, rest, on_piece)


OnRead = Callable[[int, int | None], None]  # (bytes of the trace read so far, of how many: None if not known)


def counted(read: Callable[[bytes], None], on_read: OnRead | None, total: int | None,
            ranges: int = 1) -> Callable[[bytes], None]:
    """`read`, telling `on_read` after each piece how far the reading is: the bytes read here, times the
    `ranges` read at once (each by its own process, as far as this one by then), at most `total`."""
    if on_read is None:
        return read
    done = 0

    def read_counted(piece: bytes) -> None:
        nonlocal done
        read(piece)
        done += len(piece)
        on_read(done * ranges if total is None else min(done * ranges, total), total)
    return read_counted


def _array(*parts: bytes | memoryview) -> bytes:
    """`[` + parts + `]`, copied once (`b"[%s]" % piece` is several times slower on a megabyte)."""
    return b"".join((b"[", *parts, b"]"))


def _split_head(blocks: Iterator[bytes]) -> tuple[bytes | None, bytes]:
    """What comes before the events array (None for a bare list), and what was read after its `[`."""
    buf = b""
    for block in blocks:
        buf += block
        bare = _BARE_LIST.match(buf)
        if bare:
            return None, buf[bare.end() :]
        m = _EVENTS_KEY.search(buf, 0, _HEAD_LIMIT)
        if m:
            return buf[: m.start()], buf[m.end() :]
        if len(buf) > _HEAD_LIMIT:
            break
    raise Unstreamable


def _drain(rest: bytes, block: bytes, on_piece: Callable[[bytes], None]) -> bytes:
    """Hand over the complete events of `rest` + `block`; return what follows them. The last cut is
    looked for in `block` first, which finds the same one without joining the two."""
    cut = _last_cut(block)
    if cut >= 0:
        on_piece(_array(rest, memoryview(block)[: cut + 1]))
        return block[cut + 2 :]
    buf = rest + block  # no cut in the block alone: an event longer than a block, or a cut on the seam
    cut = _last_cut(buf)
    if cut < 0:
        return buf
    on_piece(_array(memoryview(buf)[: cut + 1]))
    return buf[cut + 2 :]


def _last_cut(buf: bytes) -> int:
    """Where the last `},` before a `{` is: most likely the end of an event, checked by decoding."""
    pos = len(buf)
    for _ in range(64):  # a few false starts (nested objects) at most; else wait for more bytes
        pos = buf.rfind(b"},", 0, pos)
        if pos < 0 or buf[pos + 2 : pos + 258].lstrip()[:1] == b"{":
            return pos
    return -1


def _finish(head: bytes | None, rest: bytes, on_piece: Callable[[bytes], None]) -> dict[str, Any]:
    """Hand over the last events: up to the `]` that closes a JSON array of them and after which the rest of
    the document parses. Both are checked: after the events Kineto writes its log lines, brackets and all
    (`"INFO": ["... Profiler.cpp:907] ..."]`), other tools their `deviceProperties` list, and either's `]`
    leaves a document that parses around a piece that is no array."""
    end = len(rest)
    tried = 0
    while tried < 16:
        end = rest.rfind(b"]", 0, end)
        if end < 0:
            break
        if not _closes_events(rest, end):
            continue
        tried += 1
        doc = _document_around(head, rest[end + 1 :])
        if doc is None:
            continue
        piece = _array(memoryview(rest)[:end])
        if _is_array(piece):
            on_piece(piece)
            return doc
    raise Unstreamable


def _is_array(piece: bytes) -> bool:
    """Whether `piece` is one JSON array (its items checked as JSON, not decoded into objects)."""
    try:
        msgspec.json.decode(piece, type=list[msgspec.Raw])
    except DECODE_ERRORS:
        return False
    return True


def _closes_events(rest: bytes, end: int) -> bool:
    """Whether the `]` at `end` follows an event's `}` or only whitespace (an empty remainder)."""
    before = end - 1
    while before >= 0 and rest[before] in b" \t\r\n":
        before -= 1
    return before < 0 or rest[before] == ord("}")


def _document_around(head: bytes | None, tail: bytes) -> dict[str, Any] | None:
    """The document with a marker for the events array, if `head` and `tail` make one; else None.

    The marker, not `[]`: it proves that the array we cut is the document's own `traceEvents`,
    not one of the same name nested in an earlier value."""
    if head is None:  # a bare list: nothing may follow it
        return None if tail.strip() else {}
    try:
        doc = msgspec.json.decode(head + b'"traceEvents": "' + _MARKER + b'"' + tail)
    except DECODE_ERRORS:
        return None
    return doc if isinstance(doc, dict) and doc.get("traceEvents") == _MARKER.decode() else None
