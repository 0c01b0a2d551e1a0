"""Load a Chrome trace written by torch.profiler into columns. Imports no torch.

Traces are untrusted input: the loader never evaluates anything, caps how much a file
may inflate to, and turns every way a file can be broken into a one-line `TraceError`.

Big traces are streamed: the `traceEvents` array is cut, in blocks of 256 KB,
at a `},{` between events, and each piece goes through msgspec (a union on `ph`: only
complete 'X' events get fields) straight into NumPy columns (trace/columns.py), after
which its structs are dropped, so neither the raw JSON nor one object per event is ever
held whole. A cut in the wrong place (inside a string or a nested value) leaves a piece
that is not JSON, and any such doubt sends the file down the whole-file path, so cuts
never change what is read. A piece whose fields have odd types, or an event of no known
phase, is re-read leniently (trace/lenient.py), keeping the events that make sense and
counting the rest. The decoded types are in trace/wire.py, what turns them into columns in
trace/sink.py.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnprof.trace import parallel
from attnprof.trace.builder import columns_of
from attnprof.trace.columns import Columns, EventRows
from attnprof.trace.events import GPU_CATEGORIES, LAUNCH_CATEGORIES, Args, Event  # noqa: F401
from attnprof.trace.lenient import json_or_error
from attnprof.trace.sink import Sink
from attnprof.trace.source import TraceError, blocks, gzipped, regular_file
from attnprof.trace.stream import OnRead, Unstreamable, counted, read_event_array
from attnprof.trace.wire import DECODE_ERRORS, DOC, DOC_FLOWS, PIECE, PIECE_FLOWS


@dataclass(frozen=True)
class Trace:
    """A trace's complete events, in file order, as columns (`columns`); `events` makes their `Event`s on
    demand (read from a file: a new object per access), or is the list a trace was made from."""

    source: str
    events: Sequence[Event] = None  # type: ignore[assignment]  # None: made from the columns
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    warnings: tuple[str, ...] = ()
    lenient: bool = False  # some of the file needed the slow, lenient reader
    distributed_info: dict[str, Any] | None = None  # the trace's `distributedInfo`, when a process group ran
    base_time_ns: int | None = None  # `baseTimeNanoseconds`: lines up the clocks of several traces
    # the events as arrays; made from them when not given (not compared: arrays have no one truth value)
    columns: Columns = field(default=None, compare=False, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.columns is None:
            object.__setattr__(self, "columns", columns_of(list(self.events)))
        elif self.events is None:
            object.__setattr__(self, "events", EventRows(self.columns))

    def event(self, row: int) -> Event:
        """The event of one row of the columns."""
        return self.events[row] if not isinstance(self.events, EventRows) else self.columns.event(row)

    def events_at(self, rows: np.ndarray | list[int]) -> list[Event]:
        """The events of `rows` (of the columns), in that order."""
        if not isinstance(self.events, EventRows):  # made from a list: its own objects
            return list(map(self.events.__getitem__, np.asarray(rows, np.intp).tolist()))
        return self.columns.events_at(rows)


def load(path: str | Path, max_bytes: int | None = None, readers: int | None = None,
         on_read: OnRead | None = None) -> Trace:
    """Read a `.json` or `.json.gz` torch.profiler trace (a file, or a pipe such as `<(zcat t.json.gz)`); a big
    plain file by up to `readers` processes at once (None: one per core this process may use). `max_bytes`:
    the most bytes read (None: a plain file's all, a gzip's decompressed or a pipe's DEFAULT_MAX_BYTES).
    `on_read(done, total)`: told after each piece how many bytes are read, of `total` (a plain file's size;
    None for a gzip or a pipe, whose size is known only at the end)."""
    path = Path(path)
    try:
        if not regular_file(path):  # a pipe can be read only once: held whole, then cut as a file is
            held = list(blocks(path, max_bytes, whole=True))
            try:
                return _load_streaming(iter(held), str(path))
            except Unstreamable:
                return parse(b"".join(held), source=str(path))
        try:
            size = _size(path) if max_bytes is None else min(_size(path), max_bytes)
            total = None if gzipped(path) else size
            return (_load_in_ranges(path, max_bytes, readers, on_read)
                    or _load_streaming(blocks(path, max_bytes), str(path), size, counted_by=(on_read, total)))
        except Unstreamable:
            return parse(b"".join(blocks(path, max_bytes, whole=True)), source=str(path))
    except MemoryError:
        raise TraceError(f"{path}: out of memory reading the trace (lower --max-bytes?)") from None


def parse(raw: bytes, source: str = "<memory>") -> Trace:
    """Decode a whole trace held in memory."""
    if not raw or raw.isspace():
        raise TraceError(f"{source}: file is empty")
    try:
        doc = DOC.decode(raw)
    except DECODE_ERRORS:
        try:
            return _parse_lenient(raw, source)
        except MemoryError:  # json's dicts take ~10x the raw size
            raise TraceError(f"{source}: out of memory reading the trace") from None
    sink = Sink()
    sink.add(doc if isinstance(doc, list) else doc.traceEvents)
    if sink.wants_flows:  # launches or GPU work with no correlation: the flows' ids, decoded again
        with contextlib.suppress(*DECODE_ERRORS):
            again = DOC_FLOWS.decode(raw)
            sink.add_flows(again if isinstance(again, list) else again.traceEvents)
    if isinstance(doc, list):
        return _trace(sink, source, [])
    return _trace(sink, source, doc.deviceProperties,
                  {"distributedInfo": doc.distributedInfo, "baseTimeNanoseconds": doc.baseTimeNanoseconds})


def _size(path: Path) -> int:
    """The file's size (0 if unknown: the one-process reader says why it cannot be read)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _load_in_ranges(path: Path, max_bytes: int | None, readers: int | None, on_read: OnRead | None) -> Trace | None:
    """A big plain file read by several processes, one range of its events each (None: not this file)."""
    size = _size(path)
    try:
        fits = size > 0 and (max_bytes is None or size <= max_bytes)
        parts = parallel.processes_for(path, size, readers) if fits else 1
    except OSError:  # the one-process reader says why it cannot be read
        return None
    read = parallel.read_ranges(path, size, parts, _decode_piece, Sink, on_read) if parts > 1 else None
    if read is None:
        return None
    sink, doc = read
    props = doc.get("deviceProperties")
    return _trace(sink, str(path), props if isinstance(props, list) else [], doc)


def _load_streaming(pieces: Iterator[bytes], source: str, size: int = 0,
                    counted_by: tuple[OnRead | None, int | None] = (None, None)) -> Trace:
    """The trace whose bytes come in `pieces` (about `size` bytes, when known), its events decoded a piece
    at a time (`counted_by`: on_read and the total it is told, see `load`)."""
    sink = Sink()
    sink.columns.reserve_for_bytes(size)
    try:
        doc = read_event_array(pieces, counted(lambda piece: _decode_piece(piece, sink), *counted_by))
    finally:
        getattr(pieces, "close", lambda: None)()
    props = doc.get("deviceProperties")
    return _trace(sink, source, props if isinstance(props, list) else [], doc)


def _decode_piece(data: bytes, sink: Sink) -> None:
    known = sink.wants_flows
    try:
        decoded = (PIECE_FLOWS if known else PIECE).decode(data)
    except DECODE_ERRORS:
        try:  # odd types, NaN: keep what is usable; not JSON at all: let the whole-file path say so
            items = json.loads(data)
        except (ValueError, RecursionError):
            raise Unstreamable from None
        sink.salvage(items)
        return
    try:  # msgspec checks only the strings it keeps; the whole-file reader may check all: any doubt, read whole
        data.isascii() or data.decode("utf-8")  # ASCII (most pieces) is UTF-8, and 10x faster to check
    except UnicodeDecodeError:
        raise Unstreamable from None
    sink.add(decoded)
    if sink.wants_flows and not known:  # decided on this piece, which was decoded without its flows' fields
        with contextlib.suppress(*DECODE_ERRORS):
            sink.add_flows(PIECE_FLOWS.decode(data))


def _parse_lenient(raw: bytes, source: str) -> Trace:
    doc = json_or_error(raw, source)
    if isinstance(doc, list):
        items, props = doc, []
    elif isinstance(doc, dict) and "traceEvents" in doc:
        items, props = doc["traceEvents"], doc.get("deviceProperties")
        if not isinstance(items, list):
            raise TraceError(f"{source}: 'traceEvents' is a {type(items).__name__}, not a list")
    else:
        raise TraceError(f"{source}: no 'traceEvents' list; not a torch.profiler Chrome trace")
    sink = Sink()
    sink.salvage(items)
    return _trace(sink, source, props if isinstance(props, list) else [], doc if isinstance(doc, dict) else None)


def _trace(sink: Sink, source: str, props: list[Any], doc: dict[str, Any] | None = None) -> Trace:
    """The trace a sink read (`doc`: the document around the events: distributedInfo, baseTimeNanoseconds)."""
    columns, warnings = sink.finish(source)
    info, base = (doc or {}).get("distributedInfo"), (doc or {}).get("baseTimeNanoseconds")
    return Trace(source, None, _device_props(props), warnings, sink.lenient, info if isinstance(info, dict) else None,
                 base if isinstance(base, int) and not isinstance(base, bool) else None, columns)


def _device_props(props: list[Any]) -> list[dict[str, Any]]:
    return [p for p in props if isinstance(p, dict)]
