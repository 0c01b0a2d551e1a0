"""The per-rank table of `attnprof.ranks/1` for other tools (`--ranks-out`): one row per rank's trace, the
unread ones too, as JSON lines or CSV. No rich: `--json --ranks-out` draws nothing."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from attnprof.errors import UserError
from attnprof.files import write_atomic

TABLE_COLUMNS = ("rank", "status", "rerun", "source", "instances", "busy_us", "compute_us", "attention_us",
                 "comm_us", "exposed_comm_us", "overlap_fraction", "merge_us", "span_us", "nccl_kernels", "late_us",
                 "findings", "reason")


def rank_rows(result: dict) -> list[dict]:
    """One row per rank's trace, the unread ones too, in TABLE_COLUMNS (what --ranks-out writes)."""
    rerun = set((result.get("cluster") or {}).get("rerun", []))
    rows = [{"rank": r["rank"], "status": "ok", "rerun": r["source"] in rerun, "source": r["source"],
             **{k: r.get(k) for k in TABLE_COLUMNS[4:-2]}, "findings": " ".join(f["id"] for f in r.get("findings", [])),
             "reason": ""} for r in result["ranks"]]
    return rows + [{**dict.fromkeys(TABLE_COLUMNS), "status": "unread", "rerun": u["source"] in rerun,
                    "source": u["source"], "findings": "", "reason": u["reason"]} for u in result.get("unread", [])]


def table_format(path: Path) -> str:
    """`jsonl` or `csv`, by the file's suffix; a UserError for any other (checked before the analysis)."""
    if path.suffix not in (".jsonl", ".csv"):
        raise UserError(f"--ranks-out {path}: name a .jsonl or a .csv file")
    return path.suffix[1:]


def write_rank_table(result: dict, path: Path) -> Path:
    """The per-rank table as JSON lines (.jsonl) or CSV (.csv), written whole or not at all."""
    rows = rank_rows(result)
    if table_format(path) == "jsonl":
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    else:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, TABLE_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        text = buffer.getvalue()
    write_atomic(path, text)
    return path
