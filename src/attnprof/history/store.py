"""The run history: one SQLite file (stdlib sqlite3) that every `run`, `sweep` and `lint` adds to.

Concurrency: the file is in WAL mode (readers never block the writer) and every write is one
`BEGIN IMMEDIATE` transaction, so two processes recording at once queue on SQLite's lock (busy
timeout) instead of failing; a lock still held after the timeout is retried a few times.
Schema: `PRAGMA user_version` holds the version; MIGRATIONS[i] upgrades a store from version i to
i + 1 inside the same locked transaction, so two processes opening an old store migrate it once.
A store newer than this attnprof, or a SQLite file that is not a history, is refused in one line.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from attnprof.errors import UserError

FILE_NAME = "history.sqlite"
BUSY_TIMEOUT_S = 30.0
LOCK_RETRIES = 5
COUNTS = ("gpu_ops", "kernels", "memcpy", "memset", "aten_ops", "copies")  # per forward, exact
TIMINGS = ("device_us", "latency_us")  # {"median", "p25", "p75"}
SCALARS = ("host_us", "peak_memory_bytes", "max_abs_error")
SETTING = "run."  # an environment field so named is a timing setting of the run (records.timing_settings)
RUN_FIELDS = ("time", "command", "kind", "device", "device_kind", "problem", "environment", "run_dir")


class HistoryError(UserError):
    """The store is missing, unreadable, of another schema, or has no such run."""


def default_path() -> Path:
    """ATTNPROF_HOME if set, else the platform's per-user data folder; the store is a file in it."""
    if os.environ.get("ATTNPROF_HOME"):
        return Path(os.environ["ATTNPROF_HOME"]).expanduser() / FILE_NAME
    home = Path.home()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or home / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = home / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or home / ".local" / "share")
    return base / "attnprof" / FILE_NAME


def _create_tables(db: sqlite3.Connection) -> None:
    """Version 1: a run (its command and environment) and its results, one row per (problem, variant).
    Written out literally: a migration describes a past schema and never changes."""
    db.execute("""CREATE TABLE runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL, command TEXT NOT NULL,
        kind TEXT NOT NULL, device TEXT NOT NULL, environment TEXT NOT NULL, run_dir TEXT)""")
    db.execute("""CREATE TABLE results (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, position INTEGER NOT NULL,
        name TEXT NOT NULL, problem TEXT NOT NULL, status TEXT NOT NULL, reason TEXT,
        device_us NUMERIC, device_us_p25 NUMERIC, device_us_p75 NUMERIC, time_method TEXT,
        latency_us NUMERIC, latency_us_p25 NUMERIC, latency_us_p75 NUMERIC,
        host_us NUMERIC, peak_memory_bytes NUMERIC, max_abs_error NUMERIC,
        gpu_ops NUMERIC, kernels NUMERIC, memcpy NUMERIC, memset NUMERIC, aten_ops NUMERIC, copies NUMERIC,
        findings TEXT NOT NULL, PRIMARY KEY (run_id, position))""")
    db.execute("CREATE INDEX results_by_name ON results (name)")


def _add_lookup_keys(db: sqlite3.Connection) -> None:
    """Version 2: each run's problem and device kind as columns with an index, so `compare` finds
    the previous run of the same problem on the same kind of device without reading every run."""
    db.execute("ALTER TABLE runs ADD COLUMN device_kind TEXT NOT NULL DEFAULT ''")
    db.execute("ALTER TABLE runs ADD COLUMN problem TEXT NOT NULL DEFAULT ''")
    for run_id, device, env in db.execute("SELECT id, device, environment FROM runs").fetchall():
        problems = [p for (p,) in db.execute("SELECT DISTINCT problem FROM results WHERE run_id = ?", (run_id,))]
        db.execute("UPDATE runs SET device_kind = ?, problem = ? WHERE id = ?",
                   (device_kind(json.loads(device), json.loads(env)), run_problem(problems), run_id))
    db.execute("CREATE INDEX runs_by_kind ON runs (device_kind, problem, id)")


MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_create_tables, _add_lookup_keys)
SCHEMA_VERSION = len(MIGRATIONS)


def device_kind(device: dict, environment: dict) -> str:
    """What makes two runs' times comparable: the GPU model, or on CPU the CPU model."""
    if device.get("type") == "cpu":
        return f"cpu:{environment.get('cpu') or device.get('name') or '?'}"
    return f"{device.get('type', '?')}:{device.get('name') or environment.get('gpu') or '?'}"


def run_problem(problems: list[str]) -> str:
    """A run's problem: its one problem, or a sweep's grid as its sorted points."""
    return " + ".join(sorted(set(problems)))


@contextmanager
def connect(path: Path, create: bool = True) -> Iterator[sqlite3.Connection]:
    """An open, migrated store. Without `create`, a missing file is an error instead of a new store,
    and a store that cannot be written (a read-only file or file system) is opened read-only. Any
    SQLite error while it is open (a corrupt page, a full disk) is one line: HistoryError."""
    path = Path(path)
    if not create and not path.is_file():
        raise HistoryError(f"no history at {path}: record a run first, or choose the store with --db")
    writable = create or _writable(path)
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    db = _open(path, writable)
    db.row_factory = sqlite3.Row
    with closing(db):
        try:
            db.execute("PRAGMA foreign_keys = ON")
            if writable:
                _retried(lambda: db.execute("PRAGMA journal_mode = WAL"))
                _retried(lambda: _migrate(db, path))
            else:
                _refuse_unreadable(db, path, db.execute("PRAGMA user_version").fetchone()[0], writable=False)
            yield db
        except sqlite3.Error as e:
            raise HistoryError(f"{path}: not a usable history ({' '.join(str(e).split())})") from None


def _writable(path: Path) -> bool:
    """Whether SQLite could write the store and its journal files beside it (False on a read-only
    file system, for root too)."""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


def _open(path: Path, writable: bool) -> sqlite3.Connection:
    """A connection: read-write, or read-only (`mode=ro`, reading the WAL where SQLite can share it;
    `immutable=1` where not even that is possible, as on a read-only file system)."""
    try:
        if writable:
            return sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        uri = path.resolve().as_uri()
        try:
            db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.OperationalError:
            return sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None)
    except sqlite3.Error as e:
        raise HistoryError(f"{path}: cannot open the history ({e})") from None


def _refuse_unreadable(db: sqlite3.Connection, path: Path, version: int, writable: bool) -> None:
    """A store newer than this attnprof, a SQLite file that is not a history, or (read-only) one too old
    to read without upgrading it: one line each."""
    if version > SCHEMA_VERSION:
        raise HistoryError(f"{path}: history schema version {version} is newer than this attnprof's "
                           f"({SCHEMA_VERSION}); upgrade attnprof or choose another store with --db")
    tables = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if version == 0 and tables - {"sqlite_sequence"}:
        raise HistoryError(f"{path}: not an attnprof history (it holds tables {', '.join(sorted(tables))})")
    if not writable and version < SCHEMA_VERSION:
        raise HistoryError(f"{path}: history schema version {version} must be upgraded to {SCHEMA_VERSION}, "
                           "and the store cannot be written: copy it somewhere writable and pass --db")


def _migrate(db: sqlite3.Connection, path: Path) -> None:
    if db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
        return  # the common case, without taking the write lock
    with transaction(db):
        version = db.execute("PRAGMA user_version").fetchone()[0]  # again, under the lock
        _refuse_unreadable(db, path, version, writable=True)
        for step in MIGRATIONS[version:]:
            step(db)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE takes the write lock up front (waiting up to the busy timeout), so a
    transaction never fails half way because another writer got there first."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _retried(action: Callable[[], object]) -> object:
    """action(), again after a pause while SQLite still reports the store locked or busy."""
    for attempt in range(LOCK_RETRIES):
        try:
            return action()
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e) or attempt == LOCK_RETRIES - 1:
                raise
            time.sleep(0.2 * 2**attempt)
    raise AssertionError("unreachable")


def add_run(path: Path, run: dict) -> int:
    """Store one run (see records.py for its shape); returns its id."""
    with connect(path) as db:
        return _retried(lambda: _insert(db, run))


def _insert(db: sqlite3.Connection, run: dict) -> int:
    with transaction(db):
        fields = {**{k: run.get(k) for k in RUN_FIELDS},
                  "device": json.dumps(run["device"]), "environment": json.dumps(run["environment"])}
        cursor = db.execute(f"INSERT INTO runs ({', '.join(fields)}) VALUES ({', '.join('?' * len(fields))})",
                            tuple(fields.values()))
        for position, row in enumerate(run["variants"]):
            columns = _columns(row)
            db.execute(f"INSERT INTO results (run_id, position, {', '.join(columns)}) "
                       f"VALUES (?, ?, {', '.join('?' * len(columns))})",
                       (cursor.lastrowid, position, *columns.values()))
        return cursor.lastrowid


def _columns(row: dict) -> dict:
    columns = {k: row.get(k) for k in ("name", "problem", "status", "reason", *SCALARS, *COUNTS)}
    for t in TIMINGS:
        timing = row.get(t) or {}
        columns |= {t: timing.get("median"), f"{t}_p25": timing.get("p25"), f"{t}_p75": timing.get("p75")}
    columns["time_method"] = (row.get("device_us") or {}).get("method")
    columns["findings"] = json.dumps(list(row.get("findings") or []))
    return columns


def read_runs(db: sqlite3.Connection, where: str = "1", params: tuple = (), limit: int | None = None) -> list[dict]:
    """Runs matching a WHERE clause on `runs`, newest first, each with its variants."""
    sql = f"SELECT * FROM runs WHERE {where} ORDER BY id DESC" + ("" if limit is None else f" LIMIT {int(limit)}")
    runs = [_run(dict(r)) for r in db.execute(sql, params).fetchall()]
    by_id = {r["id"]: r for r in runs}
    if by_id:
        marks = ", ".join("?" * len(by_id))
        for row in db.execute(f"SELECT * FROM results WHERE run_id IN ({marks}) ORDER BY run_id, position",
                              tuple(by_id)):
            by_id[row["run_id"]]["variants"].append(_variant(dict(row)))
    return runs


def _run(row: dict) -> dict:
    return {**row, "device": json.loads(row["device"]), "environment": json.loads(row["environment"]),
            "variants": []}


def _variant(row: dict) -> dict:
    record = {k: row[k] for k in ("name", "problem", "status", "reason")}
    for t in TIMINGS:
        record[t] = None if row[t] is None else {"median": row[t], "p25": row[f"{t}_p25"], "p75": row[f"{t}_p75"]}
    if record["device_us"]:
        record["device_us"]["method"] = row["time_method"]
    record |= {k: row[k] for k in (*SCALARS, *COUNTS)}
    record["findings"] = json.loads(row["findings"])
    return record


def get_run(db: sqlite3.Connection, run_id: int) -> dict:
    found = read_runs(db, "id = ?", (run_id,))
    if not found:
        raise HistoryError(f"no run {run_id} in the history")
    return found[0]


def latest_run(db: sqlite3.Connection) -> dict:
    found = read_runs(db, limit=1)
    if not found:
        raise HistoryError("the history has no runs yet")
    return found[0]


def previous_run(db: sqlite3.Connection, run: dict) -> dict | None:
    """The newest earlier run of the same kind and problem on the same kind of device, timed with the same
    settings (threads, rotation, graph, compile, timing method: `setting_changes`); looked for among the
    last PREVIOUS_LOOKED_AT such runs."""
    found = read_runs(db, "id < ? AND kind = ? AND problem = ? AND device_kind = ?",
                      (run["id"], run["kind"], run["problem"], run["device_kind"]), limit=PREVIOUS_LOOKED_AT)
    return next((r for r in found if not setting_changes(r, run)), None)


PREVIOUS_LOOKED_AT = 50


def setting_changes(a: dict, b: dict) -> dict:
    """{setting: {"a", "b"}} for each timing setting (environment field `run.<option>`) whose values differ
    between two runs; a setting only one run records (an older store's run) is not a difference."""
    ea, eb = a.get("environment") or {}, b.get("environment") or {}
    return {k.removeprefix(SETTING): {"a": ea[k], "b": eb[k]} for k in sorted(ea.keys() & eb.keys())
            if k.startswith(SETTING) and ea[k] != eb[k]}
