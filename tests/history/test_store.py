"""The SQLite store: WAL, schema version, migrations, refusals in one line, concurrent writers."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from attnprof.history import store
from attnprof.history.store import HistoryError

WRITES_PER_WRITER = 5


def _ids(path: Path) -> list[int]:
    with store.connect(path, create=False) as db:
        return [r["id"] for r in store.read_runs(db)]


def test_a_new_store_is_in_wal_mode_at_the_current_schema_version(db, make_run):
    store.add_run(db, make_run())
    raw = sqlite3.connect(db)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert raw.execute("PRAGMA user_version").fetchone()[0] == store.SCHEMA_VERSION
    raw.close()


def test_a_run_reads_back_as_it_was_added(db, make_run, make_row):
    run = make_run(make_row("naive", median=12.5, kernels=3), make_row("flash", status="error"))
    run_id = store.add_run(db, run)
    with store.connect(db) as conn:
        back = store.get_run(conn, run_id)
    assert back["environment"] == run["environment"]
    assert back["variants"] == run["variants"]
    assert back["device_kind"] == "cuda:NVIDIA H200"


def test_runs_are_listed_newest_first_and_previous_run_keeps_to_the_same_problem_and_device(db, make_run, make_row):
    first = store.add_run(db, make_run())
    store.add_run(db, make_run(gpu="NVIDIA A100"))
    store.add_run(db, make_run(make_row(problem="other")))
    last = store.add_run(db, make_run())
    assert _ids(db) == [last, last - 1, last - 2, first]
    with store.connect(db) as conn:
        assert store.previous_run(conn, store.get_run(conn, last))["id"] == first
        assert store.previous_run(conn, store.get_run(conn, first)) is None


def test_concurrent_threads_lose_no_run(db, make_run):
    store.add_run(db, make_run())  # the threads race on writes, not on creating the file
    errors = []

    def write():
        try:
            for _ in range(WRITES_PER_WRITER):
                store.add_run(db, make_run())
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=write) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(_ids(db)) == 1 + 8 * WRITES_PER_WRITER


WRITER = """
import json, sys
from attnprof.history import store
run = json.loads(sys.argv[2])
for _ in range(int(sys.argv[3])):
    store.add_run(sys.argv[1], run)
"""


def test_concurrent_processes_lose_no_run_even_while_creating_the_store(db, make_run):
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(db), json.dumps(make_run()), str(WRITES_PER_WRITER)],
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errors
    assert len(_ids(db)) == 4 * WRITES_PER_WRITER


VERSION_1 = """
CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL, command TEXT NOT NULL,
    kind TEXT NOT NULL, device TEXT NOT NULL, environment TEXT NOT NULL, run_dir TEXT);
CREATE TABLE results (run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, position INTEGER NOT NULL,
    name TEXT NOT NULL, problem TEXT NOT NULL, status TEXT NOT NULL, reason TEXT,
    device_us NUMERIC, device_us_p25 NUMERIC, device_us_p75 NUMERIC, time_method TEXT,
    latency_us NUMERIC, latency_us_p25 NUMERIC, latency_us_p75 NUMERIC,
    host_us NUMERIC, peak_memory_bytes NUMERIC, max_abs_error NUMERIC,
    gpu_ops NUMERIC, kernels NUMERIC, memcpy NUMERIC, memset NUMERIC, aten_ops NUMERIC, copies NUMERIC,
    findings TEXT NOT NULL, PRIMARY KEY (run_id, position));
CREATE INDEX results_by_name ON results (name);
INSERT INTO runs VALUES (1, '2026-01-01T00:00:00Z', 'attnprof run', 'run', '{"type": "cpu", "name": "x86_64"}',
    '{"cpu": "AMD EPYC", "torch": "2.9.0"}', NULL);
INSERT INTO results (run_id, position, name, problem, status, device_us, kernels, findings)
    VALUES (1, 0, 'naive', '1_2_64_16_bf16', 'ok', 80.5, 4, '["hidden-copy"]');
PRAGMA user_version = 1;
"""


def test_a_version_1_store_migrates_and_keeps_its_runs(db, make_run):
    raw = sqlite3.connect(db)
    raw.executescript(VERSION_1)
    raw.close()
    new = store.add_run(db, make_run())
    with store.connect(db) as conn:
        old = store.get_run(conn, 1)
        assert conn.execute("PRAGMA user_version").fetchone()[0] == store.SCHEMA_VERSION
    assert (old["device_kind"], old["problem"]) == ("cpu:AMD EPYC", "1_2_64_16_bf16")
    assert old["variants"][0]["kernels"] == 4 and old["variants"][0]["findings"] == ["hidden-copy"]
    assert new == 2


def test_a_store_of_a_newer_schema_is_refused_in_one_line(db):
    raw = sqlite3.connect(db)
    raw.execute("PRAGMA user_version = 99")
    raw.close()
    with pytest.raises(HistoryError, match="schema version 99 is newer") as e:
        store.add_run(db, {})
    assert "\n" not in str(e.value)


def test_a_sqlite_file_of_another_program_is_refused(db):
    raw = sqlite3.connect(db)
    raw.execute("CREATE TABLE notes (text TEXT)")
    raw.commit()
    raw.close()
    with pytest.raises(HistoryError, match="not an attnprof history"), store.connect(db):
        pass


def test_a_file_that_is_not_sqlite_is_refused(db):
    db.write_text("hello, not a database\n" * 100)
    with pytest.raises(HistoryError, match="not a usable history"), store.connect(db):
        pass


def test_reading_a_missing_store_fails_without_creating_it(db):
    with pytest.raises(HistoryError, match="no history at"), store.connect(db, create=False):
        pass
    assert not db.exists()


def test_an_unknown_run_is_an_error(db, make_run):
    store.add_run(db, make_run())
    with store.connect(db) as conn, pytest.raises(HistoryError, match="no run 7"):
        store.get_run(conn, 7)


def test_the_default_store_follows_attnprof_home_then_the_platform(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNPROF_HOME", str(tmp_path / "home"))
    assert store.default_path() == tmp_path / "home" / store.FILE_NAME
    monkeypatch.delenv("ATTNPROF_HOME")
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert store.default_path() == tmp_path / "xdg" / "attnprof" / store.FILE_NAME
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "local"))
    assert store.default_path() == tmp_path / "local" / "attnprof" / store.FILE_NAME
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(Path, "home", lambda: tmp_path)
    assert store.default_path() == tmp_path / "Library" / "Application Support" / "attnprof" / store.FILE_NAME
