"""Load a Chrome trace written by torch.profiler into typed events. Imports no torch.

Traces are untrusted input: the loader never evaluates anything, caps how much a file
may inflate to, and turns every way a file can be broken into a one-line `TraceError`.

Big traces are streamed: the `traceEvents` array is cut, in blocks of about a megabyte,
at a `},{` between events, and each piece goes through msgspec straight into typed
structs, so the raw JSON is never held whole and only complete ('X') events stay. Kept
events share equal names and list arguments, which is most of them. A cut in the wrong
place (inside a string or a nested value) leaves a piece that is not JSON, and any such
doubt sends the file down the whole-file path, so cuts never change what is read. A piece
whose fields have odd types is re-read leniently, keeping the events that make sense and
counting the rest.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter
from pathlib import Path
from typing import Annotated, Any

import msgspec

from attnprof.trace.columns import ColumnBuilder, Columns, columns_of
from attnprof.trace.source import TraceError, blocks, first_line, regular_file
from attnprof.trace.stream import Unstreamable, read_event_array

DEFAULT_MAX_BYTES = 4 << 30  # decompressed size cap: a gzip bomb stops here
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
_KEPT_PHASES = ("X",)  # complete events; flows and instants carry nothing we count
# msgspec raises UnicodeDecodeError for bad UTF-8 and RecursionError for deep nesting
_DECODE_ERRORS = (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError, RecursionError)
# converting one decoded event: a lone surrogate (`"\ud800"` is valid JSON) cannot become a number or UTF-8
_CONVERT_ERRORS = (msgspec.ValidationError, RecursionError, UnicodeEncodeError)


class Args(msgspec.Struct, gc=False, omit_defaults=True):
    """The args attnprof reads (msgspec skips the others while decoding); events share equal ones."""

    correlation: int | None = None
    registers_per_thread: int | None = msgspec.field(default=None, name="registers per thread")
    shared_memory: int | None = msgspec.field(default=None, name="shared memory")
    blocks_per_sm: float | None = msgspec.field(default=None, name="blocks per SM")
    warps_per_sm: float | None = msgspec.field(default=None, name="warps per SM")
    grid: list[int] | None = None
    block: list[int] | None = None
    est_occupancy_pct: float | None = msgspec.field(default=None, name="est. achieved occupancy %")
    bytes: int | None = None
    input_dims: list[Any] | None = msgspec.field(default=None, name="Input Dims")
    input_type: list[Any] | None = msgspec.field(default=None, name="Input type")
    device: int | None = None
    stream: int | None = None


class Event(msgspec.Struct, gc=False):
    """One complete ('X') event. Times are microseconds, as torch.profiler writes them.

    Loaded events share equal strings and list arguments: treat them as read-only.
    """

    name: str = ""
    cat: str = ""
    ph: str = ""
    ts: float = 0.0
    dur: float = 0.0
    pid: int | str = 0
    tid: int | str = 0
    args: Args | None = None

    @property
    def end(self) -> float:
        return self.ts + self.dur

class _WireArgs(Args, gc=False, omit_defaults=True):
    """Args as decoded: list fields stay raw JSON until `_Sink` swaps in one shared list per value."""

    grid: msgspec.Raw = None  # type: ignore[assignment]
    block: msgspec.Raw = None  # type: ignore[assignment]
    input_dims: msgspec.Raw = msgspec.field(default=None, name="Input Dims")  # type: ignore[assignment]
    input_type: msgspec.Raw = msgspec.field(default=None, name="Input type")  # type: ignore[assignment]


class _WireEvent(Event, gc=False):
    ts: float = math.nan  # a complete event without ts or dur is dropped, not put at time 0
    dur: Annotated[float, msgspec.Meta(ge=0)] = -1.0
    args: _WireArgs | None = None  # type: ignore[assignment]


class _WireFile(msgspec.Struct, gc=False):
    traceEvents: list[_WireEvent]  # noqa: N815 (the format's name)
    deviceProperties: list[Any] = []  # noqa: N815
    distributedInfo: Any = None  # noqa: N815 (rank, world_size, backend: what torch.distributed said)
    baseTimeNanoseconds: Any = None  # noqa: N815 (Kineto writes ts relative to this)


_PHASE = attrgetter("ph")
_NO_ARGS = _WireArgs()  # args holding nothing read here: one object shared by all such events
_DOC = msgspec.json.Decoder(_WireFile | list[_WireEvent])  # some tools write a bare event list
_PIECE = msgspec.json.Decoder(list[_WireEvent])


@dataclass(frozen=True)
class Trace:
    source: str
    events: list[Event]  # complete events only, in file order
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    warnings: tuple[str, ...] = ()
    lenient: bool = False  # some of the file needed the slow, lenient reader
    distributed_info: dict[str, Any] | None = None  # the trace's `distributedInfo`, when a process group ran
    base_time_ns: int | None = None  # `baseTimeNanoseconds`: lines up the clocks of several traces
    # the events as arrays; made from them when not given (not compared: arrays have no one truth value)
    columns: Columns = field(default=None, compare=False, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.columns is None:
            object.__setattr__(self, "columns", columns_of(self.events))


def load(path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES) -> Trace:
    """Read a `.json` or `.json.gz` torch.profiler trace (a file, or a pipe such as `<(zcat t.json.gz)`)."""
    path = Path(path)
    try:
        if not regular_file(path):  # a pipe can be read only once: whole, then decoded
            return parse(b"".join(blocks(path, max_bytes)), source=str(path))
        try:
            return _load_streaming(path, max_bytes)
        except Unstreamable:
            return parse(b"".join(blocks(path, max_bytes)), source=str(path))
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


def _load_streaming(path: Path, max_bytes: int) -> Trace:
    pieces, sink = blocks(path, max_bytes), _Sink()
    try:
        doc = read_event_array(pieces, lambda piece: _decode_piece(piece, sink))
    finally:
        pieces.close()
    props = doc.get("deviceProperties")
    return sink.trace(str(path), props if isinstance(props, list) else [], doc)


def _decode_piece(data: bytes, sink: _Sink) -> None:
    try:
        sink.add(_PIECE.decode(data))
    except _DECODE_ERRORS:
        try:  # odd types, NaN: keep what is usable; not JSON at all: let the whole-file path say so
            items = json.loads(data)
        except (ValueError, RecursionError):
            raise Unstreamable from None
        sink.salvage(items)


class _Sink:
    """Collects the complete events of each decoded piece, sharing repeated values to save memory."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.columns = ColumnBuilder()
        self.seen = 0  # every item of the events array, of any phase
        self.dropped = 0
        self.lenient = False
        self._strings: dict[str, str] = {}  # names and categories
        self._ids: dict[int | str, int | str] = {}  # processes and threads
        self._lists: dict[bytes, list[Any] | None] = {}  # by their raw JSON

    def add(self, decoded: list[Event] | tuple[Event, ...]) -> None:
        self.seen += len(decoded)
        phases = list(map(_PHASE, decoded))
        complete = list(compress(decoded, map("X".__eq__, phases)))
        self.dropped += phases.count("")  # no phase: not an event of the format
        share, lists, decode, wire = self._strings.setdefault, self._lists, self._list, _WireArgs
        same_id, empty = self._ids.setdefault, _NO_ARGS
        dropped, cat, shared_cat = 0, None, None
        for e in complete:  # one object per distinct value: a trace repeats a few hundred names
            if e.dur < 0.0 or e.ts != e.ts:  # a _WireEvent default: the field was missing
                dropped += 1
                continue
            e.ph = "X"
            e.name = share(e.name, e.name)
            e.pid = same_id(e.pid, e.pid)
            e.tid = same_id(e.tid, e.tid)
            if e.cat != cat:  # events come in runs of one category: share it once per run
                cat = shared_cat = share(e.cat, e.cat)
            e.cat = shared_cat
            a = e.args
            if a == empty:
                e.args = empty
            elif type(a) is wire:  # decoded here, not salvaged: list fields are still raw JSON (b"" + raw: bytes)
                if (v := a.input_dims) is not None:
                    a.input_dims = lists[k] if (k := b"" + v) in lists else decode(k)
                if (v := a.input_type) is not None:
                    a.input_type = lists[k] if (k := b"" + v) in lists else decode(k)
                if (v := a.grid) is not None:
                    a.grid = lists[k] if (k := b"" + v) in lists else decode(k)
                if (v := a.block) is not None:
                    a.block = lists[k] if (k := b"" + v) in lists else decode(k)
        if dropped:
            self.dropped += dropped
            complete = [e for e in complete if e.dur >= 0.0 and e.ts == e.ts]
        self.events += complete
        self.columns.add(complete)

    def _list(self, raw: bytes) -> list[Any] | None:
        """Decode a list value not seen yet, once for all the events that repeat it."""
        try:
            value = msgspec.json.decode(raw)
        except _DECODE_ERRORS:
            value = None
        value = self._lists[raw] = value if isinstance(value, list) else None
        return value

    def salvage(self, items: Any) -> None:
        """The lenient reader: keep every complete event that can be read, count the rest."""
        self.lenient = True
        for item in items:
            phase = item.get("ph") if isinstance(item, dict) else None
            if isinstance(phase, str) and phase and phase not in _KEPT_PHASES:  # a flow, an instant: not kept
                self.seen += 1
                continue
            event = _event_or_none(item)
            if event is None:
                self.seen += 1
                self.dropped += 1
            else:
                self.add((event,))

    def trace(self, source: str, props: list[Any], doc: dict[str, Any] | None = None) -> Trace:
        if self.dropped and not self.events:
            raise TraceError(f"{source}: no usable event in the trace ({self.dropped} of {self.seen} malformed)")
        warnings = (f"skipped {self.dropped} malformed event(s)",) if self.dropped else ()
        info, base = (doc or {}).get("distributedInfo"), (doc or {}).get("baseTimeNanoseconds")
        return Trace(source, self.events, _device_props(props), warnings, self.lenient,
                     info if isinstance(info, dict) else None,
                     base if isinstance(base, int) and not isinstance(base, bool) else None,
                     self.columns.columns())


def _parse_lenient(raw: bytes, source: str) -> Trace:
    doc = _json_or_error(raw, source)
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


def _json_or_error(raw: bytes, source: str) -> Any:
    try:
        return json.loads(raw)
    except RecursionError:
        raise TraceError(f"{source}: JSON nested too deeply") from None
    except UnicodeDecodeError as e:
        raise TraceError(f"{source}: not UTF-8 text ({first_line(e)})") from None
    except ValueError as e:
        error = e
    body = raw.strip()
    if body[:1] == b"[" and body[-1:] != b"]":  # the Chrome array format may omit the closing ]
        try:
            return json.loads(body.rstrip(b",\r\n\t ") + b"]")
        except (ValueError, RecursionError):
            pass
    if isinstance(error, json.JSONDecodeError) and (
        error.pos >= len(error.doc.rstrip()) or error.msg.startswith("Unterminated string")
    ):
        raise TraceError(f"{source}: JSON ends early; the file looks truncated") from None
    raise TraceError(f"{source}: not JSON ({first_line(error)})") from None


def _event_or_none(item: Any) -> Event | None:
    if not isinstance(item, dict) or "ts" not in item or "dur" not in item:
        return None
    try:
        event = msgspec.convert(item, Event, strict=False)
    except _CONVERT_ERRORS:
        args = item.get("args")
        bare = {k: v for k, v in item.items() if k != "args"}
        try:
            event = msgspec.convert(bare, Event, strict=False)
        except _CONVERT_ERRORS:
            return None
        if isinstance(args, dict):  # salvage what the args hold that is well typed
            event.args = _lenient_args(args)
    if not (math.isfinite(event.ts) and math.isfinite(event.dur)) or event.dur < 0:
        return None
    return event


def _lenient_args(args: dict[str, Any]) -> Args | None:
    good = {}
    for key, value in args.items():
        try:
            msgspec.convert({key: value}, Args, strict=False)
            good[key] = value
        except _CONVERT_ERRORS:
            continue
    return msgspec.convert(good, Args, strict=False)


def _device_props(props: list[Any]) -> list[dict[str, Any]]:
    return [p for p in props if isinstance(p, dict)]
