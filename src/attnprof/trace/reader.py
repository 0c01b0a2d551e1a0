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
counting the rest.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Union

import msgspec
import numpy as np

from attnprof.trace import parallel
from attnprof.trace.builder import ColumnBuilder, columns_of
from attnprof.trace.columns import Columns, EventRows
from attnprof.trace.events import GPU_CATEGORIES, LAUNCH_CATEGORIES, Args, Correlation, Event  # noqa: F401
from attnprof.trace.fields import FieldLosses, text_or_int
from attnprof.trace.launch_args import carry_launch_geometry
from attnprof.trace.lenient import event_or_none, json_or_error
from attnprof.trace.source import TraceError, blocks, gzipped, regular_file
from attnprof.trace.stream import OnRead, Unstreamable, counted, read_event_array

_KEPT_PHASES = ("X",)  # complete events; flows and instants carry nothing we count
# msgspec raises UnicodeDecodeError for bad UTF-8 and RecursionError for deep nesting
_DECODE_ERRORS = (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError, RecursionError)


class _WireArgs(Args, gc=False, omit_defaults=True):
    """Args as decoded: list fields stay raw JSON until `_Sink` swaps in one shared list per value; no
    correlation reads as -1 (as the column has it), so that the column is one pass over ints."""

    correlation: Correlation | None = -1
    # roctracer writes these as text ("0x0", "2560"): read as given, made numbers once per distinct set
    bytes: int | str | None = None  # type: ignore[assignment]
    device: int | str | None = None  # type: ignore[assignment]
    stream: int | str | None = None  # type: ignore[assignment]
    grid: msgspec.Raw = None  # type: ignore[assignment]
    block: msgspec.Raw = None  # type: ignore[assignment]
    input_dims: msgspec.Raw = msgspec.field(default=None, name="Input Dims")  # type: ignore[assignment]
    input_type: msgspec.Raw = msgspec.field(default=None, name="Input type")  # type: ignore[assignment]


class _WireEvent(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    """A complete event as decoded (the events array is a union on `ph`: other phases decode to nothing); its
    fields in the order the builder reads them at once (`builder.EVENT_FIELDS`)."""

    name: str = ""
    cat: str = ""
    ts: float = math.nan  # a complete event without ts or dur is dropped, not put at time 0
    dur: Annotated[float, msgspec.Meta(ge=0)] = -1.0
    pid: int | str = 0
    tid: int | str = 0
    args: _WireArgs | None = None


# The format's other phases, each decoded to an empty struct; an event of none of these, or without a
# phase, fails the piece's decode and sends it down the lenient path, which drops or skips it as before.
_PHASES = "BEiICbneSTpFstfPONDMVvRc()"  # the format's phases other than X, one character each
_OTHER_PHASES = tuple(msgspec.defstruct(f"_Phase{i}", [], tag_field="ph", tag=phase, gc=False)
                      for i, phase in enumerate(_PHASES))
_WireItem = Union[(_WireEvent, *_OTHER_PHASES)]  # noqa: UP007 (made from a tuple of types)


class _WireFile(msgspec.Struct, gc=False):
    traceEvents: list[_WireItem]  # noqa: N815 (the format's name)
    deviceProperties: list[Any] = []  # noqa: N815
    distributedInfo: Any = None  # noqa: N815 (rank, world_size, backend: what torch.distributed said)
    baseTimeNanoseconds: Any = None  # noqa: N815 (Kineto writes ts relative to this)


_DOC = msgspec.json.Decoder(_WireFile | list[_WireItem])  # some tools write a bare event list
_PIECE = msgspec.json.Decoder(list[_WireItem])
_ENCODE = msgspec.json.Encoder().encode  # as the builder keys a set of decoded args


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
        doc = _DOC.decode(raw)
    except _DECODE_ERRORS:
        try:
            return _parse_lenient(raw, source)
        except MemoryError:  # json's dicts take ~10x the raw size
            raise TraceError(f"{source}: out of memory reading the trace") from None
    sink = _Sink()
    if isinstance(doc, list):
        sink.add(doc)
        return sink.trace(source, [])
    sink.add(doc.traceEvents)
    return sink.trace(source, doc.deviceProperties,
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
    read = parallel.read_ranges(path, size, parts, _decode_piece, _Sink, on_read) if parts > 1 else None
    if read is None:
        return None
    sink, doc = read
    props = doc.get("deviceProperties")
    return sink.trace(str(path), props if isinstance(props, list) else [], doc)


def _load_streaming(pieces: Iterator[bytes], source: str, size: int = 0,
                    counted_by: tuple[OnRead | None, int | None] = (None, None)) -> Trace:
    """The trace whose bytes come in `pieces` (about `size` bytes, when known), its events decoded a piece
    at a time (`counted_by`: on_read and the total it is told, see `load`)."""
    sink = _Sink()
    sink.columns.reserve_for_bytes(size)
    try:
        doc = read_event_array(pieces, counted(lambda piece: _decode_piece(piece, sink), *counted_by))
    finally:
        getattr(pieces, "close", lambda: None)()
    props = doc.get("deviceProperties")
    return sink.trace(source, props if isinstance(props, list) else [], doc)


def _decode_piece(data: bytes, sink: _Sink) -> None:
    try:
        decoded = _PIECE.decode(data)
    except _DECODE_ERRORS:
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


class _Sink:
    """Turns each decoded piece into columns; keeps no object per event (the args are kept once per
    distinct set, their raw lists decoded once per distinct value)."""

    def __init__(self) -> None:
        self.columns = ColumnBuilder(self._shared_args)
        self.seen = 0  # every item of the events array, of any phase
        self.kept = 0
        self.dropped = 0
        self.lenient = False
        self.losses = FieldLosses()  # the args fields dropped, on how many events
        self._lists: dict[bytes, list[Any] | None] = {}  # by their raw JSON

    def add(self, decoded: list[_WireEvent]) -> None:
        self.seen += len(decoded)
        complete = list(filter(_WireEvent.__instancecheck__, decoded))  # one C-level pass
        dropped = self.columns.add(complete, decoded=True)
        self.dropped += dropped
        self.kept += len(complete) - dropped

    def counts(self) -> tuple[int, int, int, bool, FieldLosses]:
        return self.seen, self.kept, self.dropped, self.lenient, self.losses

    def add_counts(self, counts: tuple[int, int, int, bool, FieldLosses]) -> None:
        """Another sink's counts (a range read by another process)."""
        self.seen, self.kept, self.dropped = (a + b for a, b in zip(self.counts()[:3], counts[:3], strict=True))
        self.lenient = self.lenient or counts[3]
        self.losses.merge(counts[4])

    def _shared_args(self, a: Args) -> Args:
        """The one Args of a distinct set of decoded args (its correlation already taken out); args the lenient
        reader made are typed already."""
        if not isinstance(a, _WireArgs):
            return a
        key = _ENCODE(a)  # the builder's key of this set (lost fields are counted by it)
        lists, number = partial(self._list, key=key), partial(self._number, key=key)
        return Args(None, a.registers_per_thread, a.shared_memory, a.blocks_per_sm, a.warps_per_sm,
                    lists(a.grid, "grid"), lists(a.block, "block"), a.est_occupancy_pct, number(a.bytes, "bytes"),
                    lists(a.input_dims, "Input Dims"), lists(a.input_type, "Input type"), number(a.device, "device"),
                    number(a.stream, "stream"))

    def _number(self, value: int | str | None, name: str, key: bytes) -> int | None:
        """A whole-number field: text that writes a number read as it ("0x0"), other text dropped and counted."""
        value = text_or_int(value)
        if isinstance(value, str):
            self.losses.lost(name, value, key)
            return None
        return value

    def _list(self, raw: msgspec.Raw | None, name: str, key: bytes) -> list[Any] | None:
        """A raw list value decoded, once for all the events that repeat it; None (counted as a field lost)
        if it is not a list."""
        if raw is None:
            return None
        text = bytes(raw)
        if text not in self._lists:
            try:
                value = msgspec.json.decode(text)
            except _DECODE_ERRORS:
                value = None
            self._lists[text] = value if isinstance(value, list) else None
        if self._lists[text] is None and text != b"null":
            self.losses.lost(name, text.decode("utf-8", "replace"), key)
        return self._lists[text]

    def salvage(self, items: Any) -> None:
        """The lenient reader: keep every complete event that can be read, count the rest."""
        self.lenient = True
        kept = []
        for item in items:
            self.seen += 1
            phase = item.get("ph") if isinstance(item, dict) else None
            if isinstance(phase, str) and phase and phase not in _KEPT_PHASES:  # a flow, an instant: not kept
                continue
            event = event_or_none(item, self.losses)
            if event is None or event.ph != "X":  # no phase, or one not of the format
                self.dropped += 1
            else:
                kept.append(event)
        self.columns.add(kept)
        self.kept += len(kept)

    def trace(self, source: str, props: list[Any], doc: dict[str, Any] | None = None) -> Trace:
        if self.dropped and not self.kept:
            raise TraceError(f"{source}: no usable event in the trace ({self.dropped} of {self.seen} malformed)")
        warnings = (f"skipped {self.dropped} malformed event(s)",) if self.dropped else ()
        info, base = (doc or {}).get("distributedInfo"), (doc or {}).get("baseTimeNanoseconds")
        # the builder refers back to this sink (its args hook): dropped here, the builder's arrays the
        # columns do not keep go now, not at the next collection of cycles (after the analysis, maybe)
        arg_codes = self.columns.arg_codes
        columns, self.columns = self.columns.columns(), None
        warnings += tuple(self.losses.warnings(arg_codes, columns.args))
        carry_launch_geometry(columns)  # ROCm 6 writes a kernel's grid and block on its launch
        return Trace(source, None, _device_props(props), warnings, self.lenient,
                     info if isinstance(info, dict) else None,
                     base if isinstance(base, int) and not isinstance(base, bool) else None, columns)


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
    sink = _Sink()
    sink.salvage(items)
    return sink.trace(source, props if isinstance(props, list) else [], doc if isinstance(doc, dict) else None)


def _device_props(props: list[Any]) -> list[dict[str, Any]]:
    return [p for p in props if isinstance(p, dict)]
