"""The verbs on the store: record a run, list the runs with what changed, compare two runs."""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path

from attnprof.contracts import HistoryResult
from attnprof.history import store
from attnprof.history.compare import DEFAULT_THRESHOLD, compare, count_changes, environment_changes
from attnprof.history.store import HistoryError

DURATION = re.compile(r"^(\d+)\s*([mhdw])$")
UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400, "w": 604800}
MAX_AGE_DAYS = 100 * 366  # a century: further back than any run, and well inside datetime's range


def recording_rank() -> bool:
    """Only rank 0 of a distributed run (torchrun sets RANK) records, so a run lands once."""
    return os.environ.get("RANK", "0").strip() in ("", "0")


def record(run: dict, db: str | Path | None = None) -> int | None:
    """Add a run (records.from_run / from_sweep / from_lint) to the store; None on another rank."""
    if not recording_rank():
        return None
    return store.add_run(Path(db) if db else store.default_path(), run)


def history(db: str | Path | None = None, since: str | None = None, variant: str | None = None) -> dict:
    """The `attnprof.history/1` dict: runs newest first, each with its `changes` since the previous
    run of the same problem on the same kind of device (environment and counts)."""
    path = Path(db) if db else store.default_path()
    where, params = ["1"], []
    if since:
        where.append("time >= ?")
        params.append(since_time(since))
    if variant:
        where.append("id IN (SELECT run_id FROM results WHERE name = ?)")
        params.append(variant)
    with store.connect(path, create=False) as conn:
        runs = store.read_runs(conn, " AND ".join(where), tuple(params))
        for run in runs:
            run["changes"] = _changes(store.previous_run(conn, run), run)
    if variant:
        for run in runs:
            run["variants"] = [v for v in run["variants"] if v["name"] == variant]
            if run["changes"]:
                run["changes"]["counts"] = [c for c in run["changes"]["counts"] if c["name"] == variant]
    return HistoryResult(store=str(path), runs=runs).to_payload()


def _changes(before: dict | None, run: dict) -> dict | None:
    if before is None:
        return None
    rows = {(v["problem"], v["name"]): v for v in before["variants"]}
    counts = [{"name": v["name"], "problem": v["problem"], "counts": found}
              for v in run["variants"] if (key := (v["problem"], v["name"])) in rows
              and (found := count_changes(rows[key], v))]
    return {"since": before["id"], "environment": environment_changes(before, run), "counts": counts}


def since_time(text: str, now: dt.datetime | None = None) -> str:
    """`7d`, `12h`, `30m`, `2w` ago, or an ISO date or time (local unless it says its zone), as the
    store's UTC text."""
    now = now or dt.datetime.now(dt.timezone.utc)
    match = DURATION.match(text.strip().lower())
    if match:
        seconds = int(match[1]) * UNIT_SECONDS[match[2]]
        if seconds > MAX_AGE_DAYS * 86400:
            raise HistoryError(f"--since: {text.strip()} is more than a century ago; give an age up to "
                               f"{MAX_AGE_DAYS}d, or a date")
        return (now - dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        moment = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        return moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # a naive time is local
    except (ValueError, OverflowError, OSError):  # not a date, or one the platform cannot convert
        raise HistoryError(f"--since: expected a date (2026-11-01), a time or an age (7d, 12h), "
                           f"got {text!r}") from None


def compare_runs(db: str | Path | None = None, a: int | None = None, b: int | None = None,
                 threshold: float = DEFAULT_THRESHOLD) -> dict:
    """B (default: the latest run) against A (default: the previous run of B's problem on B's kind of
    device, None when there is none); the `attnprof.compare/1` dict (compare.py says what each
    verdict means)."""
    path = Path(db) if db else store.default_path()
    with store.connect(path, create=False) as conn:
        run_b = store.get_run(conn, b) if b is not None else store.latest_run(conn)
        run_a = store.get_run(conn, a) if a is not None else store.previous_run(conn, run_b)
        before_a = store.previous_run(conn, run_a) if run_a else None
    return compare(run_a, run_b, before_a, threshold)
