"""The reader's wire types: what msgspec decodes a trace's JSON into (a union on `ph`: complete events get
their fields, flows theirs, other phases nothing), before the sink turns it into columns. Imports no torch."""

from __future__ import annotations

import math
from typing import Annotated, Any, Union

import msgspec

from attnprof.trace.events import Args, Correlation

KEPT_PHASES = ("X",)  # complete events; flows and instants carry nothing we count
# msgspec raises UnicodeDecodeError for bad UTF-8, RecursionError for deep nesting, and UnicodeEncodeError when an
# event converted back holds a lone surrogate ("\ud800" is valid JSON): UnicodeError covers both
DECODE_ERRORS = (msgspec.ValidationError, msgspec.DecodeError, UnicodeError, RecursionError)


class WireArgs(Args, gc=False, omit_defaults=True):
    """Args as decoded: list fields stay raw JSON until `Sink` swaps in one shared list per value; no
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


class WireEvent(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    """A complete event as decoded (the events array is a union on `ph`: other phases decode to nothing); its
    fields in the order the builder reads them at once (`builder.EVENT_FIELDS`)."""

    name: str = ""
    cat: str = ""
    ts: float = math.nan  # a complete event without ts or dur is dropped, not put at time 0
    dur: Annotated[float, msgspec.Meta(ge=0)] = -1.0
    pid: int | str = 0
    tid: int | str = 0
    args: WireArgs | None = None


# The format's other phases, each decoded to an empty struct; an event of none of these, or without a
# phase, fails the piece's decode and sends it down the lenient path, which drops or skips it as before.
_PHASES = "BEiICbneSTpFtPONDMVvRc()"  # the format's phases other than X and the flows' s and f, one character each
_OTHER_PHASES = tuple(msgspec.defstruct(f"_Phase{i}", [], tag_field="ph", tag=phase, gc=False)
                      for i, phase in enumerate(_PHASES))
# a flow's start and finish (trace/flows.py: the launch-to-GPU link where events carry no correlation), typed
# as Kineto writes them (an odd one sends the piece down the lenient path, which skips that flow; ids within
# int32, as the correlation column's); decoded with fields only where the trace needs them (a flow or two a
# kernel: ~20% of a read), else as the other phases are
FLOW_ID = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
_FLOW_FIELDS = [("id", FLOW_ID, 0), ("cat", str, ""), ("pid", int | str, 0), ("tid", int | str, 0),
                ("ts", float, math.nan)]
FLOW_START, FLOW_END = (msgspec.defstruct(f"_Flow{p}", _FLOW_FIELDS, tag_field="ph", tag=p, gc=False) for p in "sf")
_BARE_FLOWS = tuple(msgspec.defstruct(f"_BareFlow{p}", [], tag_field="ph", tag=p, gc=False) for p in "sf")


class WireFile(msgspec.Struct, gc=False):
    traceEvents: list[Any]  # noqa: N815 (the format's name; the decoder's items: see `decoders`)
    deviceProperties: list[Any] = []  # noqa: N815
    distributedInfo: Any = None  # noqa: N815 (rank, world_size, backend: what torch.distributed said)
    baseTimeNanoseconds: Any = None  # noqa: N815 (Kineto writes ts relative to this)


def decoders(flows: bool) -> tuple[msgspec.json.Decoder, msgspec.json.Decoder]:
    """(the whole document's decoder, a piece's): flows with their fields or bare."""
    item = Union[(WireEvent, *((FLOW_START, FLOW_END) if flows else _BARE_FLOWS), *_OTHER_PHASES)]  # noqa: UP007
    file = msgspec.defstruct("WireFile", [("traceEvents", list[item])], bases=(WireFile,), gc=False)
    return msgspec.json.Decoder(file | list[item]), msgspec.json.Decoder(list[item])  # a bare event list too


DOC, PIECE = decoders(flows=False)
DOC_FLOWS, PIECE_FLOWS = decoders(flows=True)
ENCODE = msgspec.json.Encoder().encode  # as the builder keys a set of decoded args
