"""The history for other tools: one JSON line per run, or CSV with one row per (run, problem, variant)."""

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


def to_jsonl(runs: list[dict]) -> str:
    return "".join(json.dumps(run) + "\n" for run in runs)


def to_csv(runs: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow((*RUN_COLUMNS, *ENVIRONMENT_COLUMNS, *VARIANT_COLUMNS))
    for run in runs:
        head = (run["id"], run["time"], run["kind"], run["device_kind"], run["command"],
                *(run["environment"].get(k) for k in ENVIRONMENT_COLUMNS))
        for row in run["variants"]:
            writer.writerow((*head, *_variant_cells(row)))
    return out.getvalue()


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
