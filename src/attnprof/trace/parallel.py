"""Read a big plain trace file in several processes at once: one byte range of its events array each.

One core decodes ~100 MB of trace a second, so a gigabyte takes ten; on a machine with more cores the
events array is cut into ranges at `},` + `{` boundaries (guessed as the streaming reader guesses its
cuts, never trusted: a wrong one leaves a piece that does not decode, and then the file is read in one
process after all), the first range is read by this process and each other one by a forked process into
columns, which come back through a pipe straight into arrays (no pickled copy). The ranges are merged
in file order, their tables of names, categories, processes, threads and args coded in first-seen order,
so the columns are the ones one process would have made. Imports no torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from attnprof.trace import source
from attnprof.trace.stream import OnRead, Unstreamable, _array, _document_around, _drain, _split_head, counted

# Smaller files are read in one process: under ~32 MB a second process's fork, its range's tables merged and
# its warm-up cost about what its half of the reading saves. From there two processes on two free cores read
# a file in ~0.6x the wall time of one, for 10-30% more CPU; on cores other jobs keep busy they gain nothing
# and lose a little (docs/lab/benchmarks.md, "The reader, session 6" and "Two readers from 32 MB, session 7"):
# `readers=1` (`attnprof analyze --workers 1`) reads in one process.
MIN_BYTES = 32 << 20
PART_BYTES = 16 << 20  # at least this much of the file per process
PROBE_BYTES = 1 << 18  # the file's start, looked at to choose how many processes read it
MANY_NAMES_MIN_BYTES = 256 << 20  # from here a file is read in ranges even when its names are mostly unique
_WINDOW = 1 << 20  # where to look for the head, a boundary, the end of the array


def processes_for(path: Path, size: int, readers: int | None = None) -> int:
    """How many processes should read `path` (1: read it in this one): at most `readers` (None: one per core
    this process may use). Linux only: elsewhere forking a process that has imported numpy is not safe
    (macOS) or not possible (Windows)."""
    if size < MIN_BYTES or readers == 1 or not hasattr(os, "sched_getaffinity"):
        return 1
    with open(path, "rb") as f:
        head = f.read(PROBE_BYTES)
    if head[:2] == b"\x1f\x8b":  # gzip cannot be read from the middle
        return 1
    if size < MANY_NAMES_MIN_BYTES and _names_mostly_unique(head):
        return 1
    return max(1, min(readers or len(os.sched_getaffinity(0)), size // PART_BYTES))


def _names_mostly_unique(head: bytes) -> bool:
    """Whether most events in the file's first bytes have names of their own. Then a second range's names,
    merged into the first's, cost more than its process saves: on unique64 (docs/lab/benchmarks.md, "Two readers
    from 32 MB, session 7") two processes held 1.33x the file to read it against one's 0.99x, for 30% more
    CPU. A guess from the bytes (`"name": "` as torch writes it), which only chooses how to read."""
    names = [chunk.split(b'"', 1)[0] for chunk in head.split(b'"name": "')[1:]]
    return len(names) >= 100 and len(set(names)) > len(names) // 2


def read_ranges(path: Path, size: int, parts: int, read_piece: Callable[[bytes, Any], None],
                new_sink: Callable[[], Any], on_read: OnRead | None = None) -> tuple[Any, dict[str, Any]] | None:
    """(a sink holding every range's columns and counts, the document around the events array), read in
    `parts` processes; None when the file's layout is not one this can vouch for (read it in one).
    `on_read`: told how far the reading is, from this process's own range (the others' go as fast)."""
    import multiprocessing  # here: ~0.1 s to import, which most runs never need

    if multiprocessing.current_process().daemon:  # a pool's worker (one of several ranks): no children, one core
        return None
    layout = _layout(path, size, parts)
    if layout is None:
        return None
    doc, spans = layout
    context = multiprocessing.get_context("fork")
    workers = []
    for start, end in spans[1:]:  # the first range is this process's own: it would wait for the others anyway
        theirs, ours = context.Pipe(duplex=False)
        process = context.Process(target=_work, args=(ours, path, start, end, read_piece, new_sink), daemon=True)
        process.start()
        ours.close()
        workers.append((process, theirs))
    sink, done = new_sink(), 0
    try:
        sink.columns.reserve_for_bytes(size)
        try:
            _read_range(path, *spans[0], counted(lambda piece: read_piece(piece, sink), on_read, size, parts))
        except Exception:  # noqa: BLE001 (as a range's process would fail: the file is read in one process)
            return None
        for _, conn in workers:
            header = _header(conn)
            if header is None:
                return None
            _receive(conn, header, sink)
            done += 1
    finally:
        for process, conn in workers:
            conn.close()
            if done < len(workers):  # one failed: the others' work is not needed
                process.kill()
            process.join()
    return sink, doc


def _layout(path: Path, size: int, parts: int) -> tuple[dict[str, Any], list[tuple[int, int]]] | None:
    """The document around the events array and the byte ranges of the array, one per process."""
    with open(path, "rb") as f:
        first = f.read(_WINDOW)
        f.seek(max(size - _WINDOW, 0))
        last_at = f.tell()
        last = f.read()
        try:
            head, rest = _split_head(iter([first]))
        except Unstreamable:
            return None
        start, found = len(first) - len(rest), _array_end(head, last)
        if found is None:
            return None
        end, doc = last_at + found[0], found[1]
        cuts = []
        for k in range(1, parts):
            f.seek(start + (end - start) * k // parts)
            at, window = f.tell(), f.read(_WINDOW)
            cut = _first_cut(window)
            if cut < 0:
                return None
            cuts.append(at + cut)
    bounds = [start, *cuts, end]
    if sorted(bounds) != bounds or len(set(bounds)) != len(bounds):
        return None
    return doc, [(bounds[0], bounds[1]), *((a + 1, b) for a, b in zip(bounds[1:], bounds[2:], strict=False))]


def _array_end(head: bytes | None, last: bytes) -> tuple[int, dict[str, Any]] | None:
    """Where in `last` the events array's `]` is, and the document around the array."""
    end = len(last)
    for _ in range(16):
        end = last.rfind(b"]", 0, end)
        if end < 0:
            return None
        doc = _document_around(head, last[end + 1:])
        if doc is not None:
            return end, doc
    return None


def _first_cut(window: bytes) -> int:
    """Where the first `},` followed by a `{` is in `window` (the `}`'s position + 1), else -1."""
    pos = 0
    for _ in range(64):
        pos = window.find(b"},", pos)
        if pos < 0:
            return -1
        if window[pos + 2: pos + 258].lstrip()[:1] == b"{":
            return pos + 1
        pos += 2
    return -1


def _read_range(path: Path, start: int, end: int, on_piece: Callable[[bytes], None]) -> None:
    """Hand bytes [start, end) of the events array to `on_piece` in pieces of whole events."""
    with open(path, "rb") as f:
        f.seek(start)
        rest, left = b"", end - start
        while left > 0:
            block = f.read(min(source._BLOCK, left))
            if not block:
                raise Unstreamable
            left -= len(block)
            rest = _drain(rest, block, on_piece)
        if rest.strip():
            on_piece(_array(rest))


def _work(conn: Any, path: Path, start: int, end: int, read_piece: Callable, new_sink: Callable) -> None:
    """In a forked process: read bytes [start, end) of the events array into a sink, send back its part."""
    try:
        sink = new_sink()
        sink.columns.reserve_for_bytes(end - start)
        _read_range(path, start, end, lambda piece: read_piece(piece, sink))
        part = sink.columns.part()
        lengths = [(k, len(a), a.dtype.str) for k, a in part.arrays.items()]
        blob, ends, hashes = part.names  # their bytes as they are, not pickled (a copy each way, held whole)
        conn.send(("ok", sink.counts(), part.tables, part.arg_sets, lengths, hashes is not None))
        for buffer in (blob, ends, *([] if hashes is None else [hashes])):
            conn.send_bytes(buffer)
        for array in part.arrays.values():
            conn.send_bytes(memoryview(array).cast("B"))
    except BaseException as e:  # noqa: BLE001 (any failure: the parent reads the file in one process)
        conn.send(("failed", type(e).__name__))
    finally:
        conn.close()
        os._exit(0)  # a forked child must not run the parent's cleanup


def _header(conn: Any) -> tuple | None:
    """What a range's process says first: its counts, tables and column lengths; None if it failed."""
    try:
        message = conn.recv()
    except EOFError:
        return None
    return message if message[0] == "ok" else None


def _receive(conn: Any, header: tuple, sink: Any) -> None:
    """Take one range's names and columns into `sink`, each column read from the pipe straight into its rows."""
    _, counts, tables, arg_sets, lengths, hashed = header
    names = (conn.recv_bytes(), conn.recv_bytes(), conn.recv_bytes() if hashed else None)

    def fill(_: str, rows: np.ndarray) -> None:
        if len(rows):
            conn.recv_bytes_into(rows)
        else:
            conn.recv_bytes()
    sink.columns.absorb(tables, names, arg_sets, lengths, fill)
    sink.add_counts(counts)
