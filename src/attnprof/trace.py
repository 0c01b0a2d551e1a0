"""Load a Chrome trace written by torch.profiler into typed events. Imports no torch.

Traces are untrusted input: the loader never evaluates anything, caps how much a gzip
stream may inflate to, and turns every way a file can be broken into a one-line
`TraceError`. Decoding goes through msgspec straight into typed structs (several times
faster than building dicts with `json`); a trace whose fields have unexpected types is
re-read leniently, keeping the events that make sense and counting the rest.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

DEFAULT_MAX_BYTES = 4 << 30  # decompressed size cap: a gzip bomb stops here
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
_KEPT_PHASES = ("X",)  # complete events; flows and instants carry nothing we count


class TraceError(ValueError):
    """The file is not a usable torch.profiler trace; the message is one line for the user."""


class Args(msgspec.Struct, gc=False, omit_defaults=True):
    correlation: int | None = None
    external_id: int | None = msgspec.field(default=None, name="External id")
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
    """One complete ('X') event. Times are microseconds, as torch.profiler writes them."""

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

    @property
    def correlation(self) -> int | None:
        return self.args.correlation if self.args else None


class _File(msgspec.Struct, gc=False):
    traceEvents: list[Event]  # noqa: N815 (the format's name)
    deviceProperties: list[dict[str, Any]] = []  # noqa: N815


@dataclass(frozen=True)
class Trace:
    source: str
    events: list[Event]  # complete events only, in file order
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    warnings: tuple[str, ...] = ()

    def of_category(self, *cats: str) -> list[Event]:
        return [e for e in self.events if e.cat in cats]


def load(path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES) -> Trace:
    """Read a `.json` or `.json.gz` torch.profiler trace."""
    path = Path(path)
    raw = _read_bytes(path, max_bytes)
    return parse(raw, source=str(path))


def parse(raw: bytes, source: str = "<memory>") -> Trace:
    if not raw.strip():
        raise TraceError(f"{source}: file is empty")
    try:
        doc = msgspec.json.decode(raw, type=_File)
        events = [e for e in doc.traceEvents if e.ph in _KEPT_PHASES]
        return Trace(source, events, _device_props(doc.deviceProperties))
    except (msgspec.ValidationError, msgspec.DecodeError):
        return _parse_lenient(raw, source)


def _read_bytes(path: Path, max_bytes: int) -> bytes:
    try:
        with open(path, "rb") as f:
            head = f.read(2)
            f.seek(0)
            if head == b"\x1f\x8b":
                return _gunzip_capped(f, path, max_bytes)
            if path.suffix == ".gz":
                raise TraceError(f"{path}: named .gz but is not gzip data")
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror or e}") from None
    if len(data) > max_bytes:
        raise TraceError(f"{path}: larger than --max-bytes ({max_bytes} bytes)")
    return data


def _gunzip_capped(f, path: Path, max_bytes: int) -> bytes:
    try:
        data = gzip.GzipFile(fileobj=f).read(max_bytes + 1)
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise TraceError(f"{path}: broken or truncated gzip ({e})") from None
    if len(data) > max_bytes:
        raise TraceError(f"{path}: decompresses to more than --max-bytes ({max_bytes} bytes)")
    return data


def _parse_lenient(raw: bytes, source: str) -> Trace:
    """Slow path for traces with odd types: keep every event that can be read, count the rest."""
    try:
        doc = json.loads(raw)
    except RecursionError:
        raise TraceError(f"{source}: JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise TraceError(f"{source}: not JSON ({_first_line(e)})") from None
    if not isinstance(doc, dict) or "traceEvents" not in doc:
        raise TraceError(f"{source}: no 'traceEvents' list; not a torch.profiler Chrome trace")
    items = doc["traceEvents"]
    if not isinstance(items, list):
        raise TraceError(f"{source}: 'traceEvents' is a {type(items).__name__}, not a list")
    events, dropped = [], 0
    for item in items:
        event = _event_or_none(item)
        if event is None:
            dropped += 1
        elif event.ph in _KEPT_PHASES:
            events.append(event)
    warnings = (f"skipped {dropped} malformed event(s)",) if dropped else ()
    props = doc.get("deviceProperties")
    return Trace(source, events, _device_props(props if isinstance(props, list) else []), warnings)


def _event_or_none(item: Any) -> Event | None:
    if not isinstance(item, dict):
        return None
    try:
        event = msgspec.convert(item, Event, strict=False)
    except msgspec.ValidationError:
        args = item.get("args")
        bare = {k: v for k, v in item.items() if k != "args"}
        try:
            event = msgspec.convert(bare, Event, strict=False)
        except msgspec.ValidationError:
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
        except msgspec.ValidationError:
            continue
    return msgspec.convert(good, Args, strict=False)


def _device_props(props: list[Any]) -> list[dict[str, Any]]:
    return [p for p in props if isinstance(p, dict)]


def _first_line(e: Exception) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__
