"""Output paths the user names: a problem with one is a one-line error naming it (exit 2), and no
output may be one of the command's inputs."""

from __future__ import annotations

import os
import shutil

import pytest

from support import assert_one_line_error, attnprof, cpu_trace


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "t.json.gz"
    shutil.copy(cpu_trace("naive"), path)
    return path


def test_html_onto_the_trace_it_reads_is_refused(trace):
    before = trace.read_bytes()
    assert_one_line_error(attnprof("analyze", str(trace), "--html", str(trace)), str(trace), "input")
    assert trace.read_bytes() == before


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_is_a_user_error_naming_the_path(trace):
    assert_one_line_error(attnprof("analyze", str(trace), "--html", "/dev/full"), "/dev/full", "No space left")


def test_html_onto_a_folder_is_a_user_error(trace, tmp_path):
    (tmp_path / "folder").mkdir()
    assert_one_line_error(attnprof("analyze", str(trace), "--html", str(tmp_path / "folder")), "folder")


def test_run_out_that_is_a_file_is_a_user_error(tmp_path):
    (tmp_path / "taken").write_text("x")
    proc = attnprof("run", "--device", "cpu", "--variants", "naive", "--out", str(tmp_path / "taken"))
    assert_one_line_error(proc, str(tmp_path / "taken"), "not a folder")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_a_user_error(trace, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    assert_one_line_error(attnprof("analyze", str(trace), "--html", str(folder / "r.html")), "r.html", "denied")
