"""The lenient reader's pieces: a whole file that msgspec rejects is parsed by the stdlib, and each event
converted on its own, keeping the fields that are well typed; every way the JSON is broken becomes a
one-line `TraceError`. Imports no torch."""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec

from attnprof.trace.events import Args, Event
from attnprof.trace.fields import INT_FIELDS, FieldLosses, int_of_text
from attnprof.trace.source import TraceError, first_line

# converting one decoded event: a lone surrogate (`"\ud800"` is valid JSON) cannot become a number or UTF-8
_CONVERT_ERRORS = (msgspec.ValidationError, RecursionError, UnicodeEncodeError)


def json_or_error(raw: bytes, source: str) -> Any:
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


def event_or_none(item: Any, losses: FieldLosses) -> Event | None:
    """The event of one decoded item, with the args fields that are well typed (a number written as text
    read as that number); each field dropped is counted in `losses`. None: not a usable complete event."""
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
            event.args = _lenient_args(args, losses)
    if not (math.isfinite(event.ts) and math.isfinite(event.dur)) or event.dur < 0:
        return None
    return event


def _lenient_args(args: dict[str, Any], losses: FieldLosses) -> Args | None:
    good = {}
    for key, value in args.items():
        if key in INT_FIELDS and (number := int_of_text(value)) is not None:
            value = number
        try:
            msgspec.convert({key: value}, Args, strict=False)
            good[key] = value
        except _CONVERT_ERRORS:
            losses.lost(key, value)
    return msgspec.convert(good, Args, strict=False)


