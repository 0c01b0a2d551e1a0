"""The reader's sink: each decoded piece of a trace into columns (trace/builder.py), with no object kept per
event (args once per distinct set, raw lists decoded once per distinct value), the lenient reader's events,
the fields dropped and the flows; `finish` makes the columns. Imports no torch."""

from __future__ import annotations

import contextlib
from functools import partial
from typing import Any

import msgspec

from attnprof.trace.builder import ColumnBuilder
from attnprof.trace.columns import Columns
from attnprof.trace.events import Args
from attnprof.trace.fields import FieldLosses, text_or_int
from attnprof.trace.flows import Flows, needs_flows
from attnprof.trace.launch_args import carry_launch_geometry
from attnprof.trace.lenient import event_or_none
from attnprof.trace.source import TraceError
from attnprof.trace.wire import DECODE_ERRORS, ENCODE, FLOW_END, FLOW_START, KEPT_PHASES, WireArgs, WireEvent


class Sink:
    """Turns each decoded piece into columns; keeps no object per event (the args are kept once per
    distinct set, their raw lists decoded once per distinct value)."""

    def __init__(self) -> None:
        self.columns = ColumnBuilder(self._shared_args)
        self.seen = 0  # every item of the events array, of any phase
        self.kept = 0
        self.dropped = 0
        self.lenient = False
        self.losses = FieldLosses()  # the args fields dropped, on how many events
        self.flows = Flows()  # launch-to-GPU flows, read where events carry no correlation
        self.wants_flows: bool | None = None  # decided at the first launch or GPU activity (None: none yet)
        self._lists: dict[bytes, list[Any] | None] = {}  # by their raw JSON

    def add(self, decoded: list[WireEvent]) -> None:
        self.seen += len(decoded)
        complete = list(filter(WireEvent.__instancecheck__, decoded))  # one C-level pass
        if self.wants_flows is None:
            self.wants_flows = needs_flows(complete)
        self.add_flows(decoded)
        dropped = self.columns.add(complete, decoded=True)
        self.dropped += dropped
        self.kept += len(complete) - dropped

    def add_flows(self, decoded: list) -> None:
        """The flows among decoded items (none when they were decoded bare: wire.decoders)."""
        for kind, starts in ((FLOW_START, True), (FLOW_END, False)):
            self.flows.add(list(filter(kind.__instancecheck__, decoded)), starts)

    def counts(self) -> tuple[int, int, int, bool, FieldLosses, Flows]:
        return self.seen, self.kept, self.dropped, self.lenient, self.losses, self.flows

    def add_counts(self, counts: tuple[int, int, int, bool, FieldLosses, Flows]) -> None:
        """Another sink's counts and flows (a range read by another process)."""
        self.seen, self.kept, self.dropped = (a + b for a, b in zip(self.counts()[:3], counts[:3], strict=True))
        self.lenient = self.lenient or counts[3]
        self.losses.merge(counts[4])
        self.flows.merge(counts[5])

    def _shared_args(self, a: Args) -> Args:
        """The one Args of a distinct set of decoded args (its correlation already taken out); args the lenient
        reader made are typed already."""
        if not isinstance(a, WireArgs):
            return a
        key = ENCODE(a)  # the builder's key of this set (lost fields are counted by it)
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
            except DECODE_ERRORS:
                value = None
            self._lists[text] = value if isinstance(value, list) else None
        if self._lists[text] is None and text != b"null":
            self.losses.lost(name, text.decode("utf-8", "replace"), key)
        return self._lists[text]

    def salvage(self, items: Any) -> None:
        """The lenient reader: keep every complete event that can be read, count the rest."""
        self.lenient = True
        kept, flows = [], {"s": [], "f": []}
        for item in items:
            self.seen += 1
            phase = item.get("ph") if isinstance(item, dict) else None
            if isinstance(phase, str) and phase in flows:
                with contextlib.suppress(*DECODE_ERRORS):
                    flows[phase].append(msgspec.convert(item, FLOW_START if phase == "s" else FLOW_END))
            if isinstance(phase, str) and phase and phase not in KEPT_PHASES:  # a flow, an instant: not kept
                continue
            event = event_or_none(item, self.losses)
            if event is None or event.ph != "X":  # no phase, or one not of the format
                self.dropped += 1
            else:
                kept.append(event)
        self.columns.add(kept)
        self.kept += len(kept)
        for phase, found in flows.items():
            self.flows.add(found, phase == "s")

    def finish(self, source: str) -> tuple[Columns, tuple[str, ...]]:
        """(the columns, the warnings of the read): the ids of the flows given where events carry none, a
        launch's geometry to its kernel where only the launch has it (ROCm 6)."""
        if self.dropped and not self.kept:
            raise TraceError(f"{source}: no usable event in the trace ({self.dropped} of {self.seen} malformed)")
        warnings = (f"skipped {self.dropped} malformed event(s)",) if self.dropped else ()
        # the builder refers back to this sink (its args hook): dropped here, the builder's arrays the
        # columns do not keep go now, not at the next collection of cycles (after the analysis, maybe)
        arg_codes = self.columns.arg_codes
        columns, self.columns = self.columns.columns(), None
        warnings += tuple(self.losses.warnings(arg_codes, columns.args))
        self.flows.correlate(columns)  # ids from the flows where events carry none
        carry_launch_geometry(columns)  # ROCm 6 writes a kernel's grid and block on its launch
        return columns, warnings
