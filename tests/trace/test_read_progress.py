"""How far the reading is: `load(on_read=...)` and `api.analyze(progress=...)` are told after each piece, in
one process, in ranges and from a gzip, and what they are told ends at the file (or, for a gzip, is not a
fraction of anything)."""

from __future__ import annotations

import gzip
import os

import pytest

from attnprof import api
from attnprof.trace import parallel, reader, source
from support import H200

TRAIN = H200 / "train_4_16_1024_64_bf16_naive.json.gz"  # 166 kB of JSON


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Blocks of 16 kB, not 256: the recorded trace is then read in ten pieces."""
    monkeypatch.setattr(source, "_BLOCK", 1 << 14)


@pytest.fixture
def plain(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(gzip.decompress(TRAIN.read_bytes()))
    return path


def told(path, **kwargs) -> list[tuple[int, int | None]]:
    calls: list[tuple[int, int | None]] = []
    reader.load(path, on_read=lambda done, total: calls.append((done, total)), **kwargs)
    return calls


def check_reaches_the_file(calls: list[tuple[int, int | None]], size: int) -> None:
    done = [d for d, _ in calls]
    assert len(calls) > 1 and done == sorted(done), "after each piece, never backwards"
    assert {t for _, t in calls} == {size}
    assert 0.9 * size <= done[-1] <= size  # the events array is nearly all of the file; never past it


def test_one_process_is_told_after_each_piece_up_to_the_file(plain):
    check_reaches_the_file(told(plain, readers=1), plain.stat().st_size)


def test_ranges_are_told_from_this_process_range_for_all(plain, monkeypatch):
    monkeypatch.setattr(parallel, "MIN_BYTES", 1)
    monkeypatch.setattr(parallel, "PART_BYTES", 50_000)
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda pid: range(2))
    got, real = [], parallel.read_ranges
    monkeypatch.setattr(parallel, "read_ranges", lambda *a: got.append(real(*a)) or got[-1])
    calls = told(plain)
    assert got and got[0] is not None  # it did read in ranges
    check_reaches_the_file(calls, plain.stat().st_size)


def test_a_gzip_is_told_bytes_inflated_of_no_known_total():
    calls = told(TRAIN)
    assert len(calls) > 1 and {t for _, t in calls} == {None}
    assert calls[-1][0] > TRAIN.stat().st_size  # inflated bytes, more than the file's


def test_analyze_says_reading_then_analysing_once(plain):
    stages: list[str] = []
    result = api.analyze(plain, progress=lambda stage, done, total: stages.append(stage))
    assert result["forwards"] > 0
    assert stages[-1] == "analysing" and stages.count("analysing") == 1
    assert set(stages[:-1]) == {"reading"} and len(stages) > 2


def test_the_terminal_displays_take_every_stage_when_not_on_a_terminal(capsys):
    from attnprof.report.progress import TraceProgress

    with TraceProgress("t.json") as shown:
        shown.update("reading", 10, 100)
        shown.update("reading", 20, None)
        shown.update("analysing", 0, None)
    from attnprof.report.progress import RanksProgress

    with RanksProgress(8) as shown:
        shown.update("ranks", 3, 8)
    assert capsys.readouterr().err == ""  # not a terminal here: drawn nowhere, no blank line left


def test_the_displays_draw_how_far_on_a_terminal(monkeypatch):
    import io

    from rich.console import Console

    from attnprof.report import progress

    screen = io.StringIO()
    monkeypatch.setattr(progress, "stderr_is_live", lambda: True)
    monkeypatch.setattr(progress, "console", lambda file=None: Console(file=screen, force_terminal=True, width=120))
    with progress.TraceProgress("big.json") as shown:
        shown.update("reading", 150 << 20, 300 << 20)
        shown._progress.refresh()
        shown.update("reading", 40 << 20, None)
        shown._progress.refresh()
        shown.update("analysing", 0, None)
        shown._progress.refresh()
    with progress.RanksProgress(8) as shown:
        shown.update("ranks", 3, 8)
        shown._progress.refresh()
    drawn = screen.getvalue()
    for said in ("reading big.json", "150 MiB of 300 MiB", "40.0 MiB inflated", "analysing big.json", "3/8"):
        assert said in drawn


def test_json_size_is_a_gzip_s_inflated_size_and_nothing_is_read_from_a_pipe(tmp_path, plain):
    assert source.json_size(plain) == plain.stat().st_size
    assert source.json_size(TRAIN) == len(gzip.decompress(TRAIN.read_bytes()))
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    assert source.json_size(fifo) == 0  # not opened: its writer's bytes are the reader's
