"""The history for other tools: one JSON line per run, or CSV with one row per (run, problem, variant).

The store holds text from commands, environments and errors, and a CSV file is opened by
spreadsheets, which run a cell that begins with `=`, `+`, `-`, `@`, a tab or a CR as a formula
(`=HYPERLINK(...)`, `+cmd|...`). So, as OWASP recommends for CSV export, such a text cell gets a
leading `'`, and control characters (ESC, which can clear a terminal, and the rest) are written
out as `\\xNN`. Numbers stay numbers; JSON lines escape control characters by themselves.
"""

from __future__ import annotations

import csv
import io
import json

from attnprof.history.store import COUNTS, SCALARS, TIMINGS

ENVIRONMENT_COLUMNS = ("torch", "cuda", "cudnn", "triton", "gpu", "driver", "cpu", "hostname", "git_commit")
RUN_COLUMNS = ("run", "time", "kind", "device_kind", "command")
VARIANT_COLUMNS = ("problem", "variant", "status", "reason",
                   *(f"{t}{q}" for t in TIMINGS for q in ("", "_p25", "_p75")), *SCALARS, *COUNTS, "findings")
FORMATS = ("csv", "jsonl")
FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet reads as the start of a formula


def to_jsonl(runs: list[dict]) -> str:
    return "".join(json.dumps(run) + "\n" for run in runs)


def to_csv(runs: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow((*RUN_COLUMNS, *ENVIRONMENT_COLUMNS, *VARIANT_COLUMNS))  # our own names: inert
    for run in runs:
        head = (run["id"], run["time"], run["kind"], run["device_kind"], run["command"],
                *(run["environment"].get(k) for k in ENVIRONMENT_COLUMNS))
        for row in run["variants"]:
            writer.writerow(tuple(map(inert_cell, (*head, *_variant_cells(row)))))
    return out.getvalue()


def inert_cell(value):
    """A text cell no spreadsheet runs and no terminal obeys; other values as they are."""
    if not isinstance(value, str):
        return value
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
                   for c in value)
    return "'" + text if value.startswith(FORMULA_LEADS) else text


def _variant_cells(row: dict) -> tuple:
    timings = []
    for t in TIMINGS:
        timing = row.get(t) or {}
        timings += [timing.get("median"), timing.get("p25"), timing.get("p75")]
    return (row["problem"], row["name"], row["status"], row.get("reason"), *timings,
            *(row.get(k) for k in (*SCALARS, *COUNTS)), " ".join(row.get("findings") or []))


def export(runs: list[dict], fmt: str) -> str:
    """The runs as text in `fmt` (csv or jsonl)."""
    return {"csv": to_csv, "jsonl": to_jsonl}[fmt](runs)
