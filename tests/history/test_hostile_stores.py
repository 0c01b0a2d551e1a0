"""Hostile stores and inputs: a corrupt data page, a store that cannot be written, an absurd --since,
and text in the store that would run as a spreadsheet formula or drive a terminal. Each gives one line
and exit 2, or output with nothing active in it."""

from __future__ import annotations

import csv
import io
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from attnprof.history import store
from attnprof.history.export import inert_cell, to_csv
from attnprof.history.query import since_time
from attnprof.history.store import HistoryError

HOSTILE = ["=HYPERLINK(\"http://x\",\"y\")", "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A2)", "\tTAB", "\rCR",
           "ok\x1b[2Jcleared", "bell\x07"]


def attnprof(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    src = str(Path(__file__).resolve().parents[2] / "src")
    return subprocess.run([sys.executable, "-m", "attnprof", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin", "HOME": str(cwd)})


def filled(db: Path, make_run, make_row, runs: int = 40) -> Path:
    for i in range(runs):
        run = make_run(make_row(f"variant-{i}" * 20, median=100.0 + i))
        run["command"] = "attnprof run " + "x" * 300
        store.add_run(db, run)
    with sqlite3.connect(db) as raw:
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return db


def corrupt_data_pages(db: Path) -> None:
    """Overwrite the store's pages after the first two (the header and schema stay intact)."""
    raw = bytearray(db.read_bytes())
    page = int.from_bytes(raw[16:18], "big") or 65536
    assert len(raw) > 4 * page, "the store is too small to have data pages"
    for start in range(2 * page, len(raw), page):
        raw[start:start + page] = bytes([0xA5]) * page
    db.write_bytes(bytes(raw))


def test_a_corrupt_data_page_is_one_line_and_exit_2_not_an_internal_error(db, make_run, make_row, tmp_path):
    corrupt_data_pages(filled(db, make_run, make_row))
    for verb in (["history"], ["history", "--export", "csv"], ["compare"]):
        proc = attnprof(*verb, "--db", str(db), cwd=tmp_path)
        assert proc.returncode == 2, (verb, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "not a usable history" in proc.stderr, proc.stderr
        assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr


def test_a_corrupt_page_raises_history_error_in_the_api_too(db, make_run, make_row):
    corrupt_data_pages(filled(db, make_run, make_row))
    with pytest.raises(HistoryError, match="not a usable history"), store.connect(db, create=False) as conn:
        store.read_runs(conn)


def test_a_store_that_cannot_be_written_is_read_read_only(db, make_run, make_row, monkeypatch):
    """On a read-only file system (even for root) SQLite cannot make its journal files: the reading
    verbs open the store with mode=ro, or immutable, and leave no file beside it."""
    filled(db, make_run, make_row, runs=3)
    before = sorted(p.name for p in db.parent.iterdir())
    monkeypatch.setattr(store, "_writable", lambda path: False)
    with store.connect(db, create=False) as conn:
        assert len(store.read_runs(conn)) == 3
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            conn.execute("DELETE FROM runs")
    assert sorted(p.name for p in db.parent.iterdir()) == before


def test_a_read_only_store_of_an_old_schema_says_it_cannot_be_upgraded(db, monkeypatch):
    with sqlite3.connect(db) as raw:
        store._create_tables(raw)
        raw.execute("PRAGMA user_version = 1")
    monkeypatch.setattr(store, "_writable", lambda path: False)
    with pytest.raises(HistoryError, match="cannot be written"), store.connect(db, create=False):
        pass


@pytest.mark.parametrize("text", ["9999999d", "99999999999999999999w", "0001-01-01T00:00:00+14:00"])
def test_an_absurd_since_is_one_line_not_an_overflow(text):
    with pytest.raises(HistoryError, match="--since"):
        since_time(text)


def test_the_cli_rejects_an_absurd_since_in_one_line(db, make_run, make_row, tmp_path):
    filled(db, make_run, make_row, runs=1)
    proc = attnprof("history", "--since", "9999999d", "--db", str(db), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "a century" in proc.stderr


def test_a_century_back_is_still_accepted():
    assert since_time("36000d").endswith("Z")


@pytest.mark.parametrize("text", HOSTILE)
def test_a_hostile_cell_is_inert(text):
    cell = inert_cell(text)
    assert not cell.startswith(("=", "+", "-", "@", "\t", "\r"))
    assert all(c.isprintable() for c in cell)


def test_numbers_stay_numbers_and_plain_text_stays_as_it_was():
    assert inert_cell(-3.5) == -3.5 and inert_cell(None) is None and inert_cell("sdpa-flash") == "sdpa-flash"


def test_the_csv_export_has_no_formula_leading_cell_and_no_control_character(make_run, make_row):
    runs = []
    for i, text in enumerate(HOSTILE):
        run = make_run(make_row(text, status="error"))
        run |= {"id": i, "command": text, "environment": {"hostname": text, "torch": text}}
        run["variants"][0]["reason"] = text
        runs.append(run)
    exported = to_csv(runs)
    assert "\x1b" not in exported and "\x07" not in exported
    rows = list(csv.reader(io.StringIO(exported)))
    cells = [c for row in rows[1:] for c in row]
    assert cells and not any(c.startswith(("=", "+", "-", "@", "\t", "\r")) for c in cells)
    assert "'=HYPERLINK(\"http://x\",\"y\")" in cells and "ok\\x1b[2Jcleared" in cells
