"""files.py: atomic writes with the permissions any program's new files get, and failures that name the path."""

from __future__ import annotations

import os
import stat
import tempfile

import pytest

from attnprof import files
from attnprof.errors import UserError


@pytest.fixture
def mask():
    """Run the test under umask 027, then put the old one back."""
    old = os.umask(0o027)
    yield 0o027
    os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_new_files_follow_the_umask_not_0600(tmp_path, mask):
    assert files.umask() == mask
    files.write_atomic(tmp_path / "results.json", "{}")
    files.write_json_atomic(tmp_path / "more.json", {"a": 1})
    files.append_jsonl(tmp_path / "lines.jsonl", {"a": 1})
    assert {mode(tmp_path / n) for n in ("results.json", "more.json", "lines.jsonl")} == {0o640}


def test_a_file_written_like_another_takes_its_mode(tmp_path, mask):
    source = tmp_path / "model.py"
    source.write_text("x = 1\n")
    source.chmod(0o604)
    files.write_atomic(tmp_path / "model.py.orig", b"x = 1\n", like=source, exclusive=True)
    assert mode(tmp_path / "model.py.orig") == 0o604
    with pytest.raises(FileExistsError):
        files.write_atomic(tmp_path / "model.py.orig", b"other", like=source, exclusive=True)
    assert (tmp_path / "model.py.orig").read_bytes() == b"x = 1\n"


def test_a_failed_write_names_the_path_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as caught:
        files.write_atomic(tmp_path / "report.html", "<html>")
    assert caught.value.filename == str(tmp_path / "report.html") and caught.value.errno == 28
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_device_is_written_to_never_replaced():
    with pytest.raises(OSError) as caught:
        files.write_atomic("/dev/full", "<html>")
    assert caught.value.filename == "/dev/full"
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)
    files.write_atomic("/dev/null", "<html>")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_run_folder_under_a_file_is_refused_naming_it(tmp_path):
    (tmp_path / "taken").write_text("x")
    with pytest.raises(NotADirectoryError) as caught:
        files.new_run_dir(tmp_path / "taken", "run")
    assert caught.value.filename == str(tmp_path / "taken")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_named():
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o555)
        with pytest.raises(PermissionError) as caught:
            files.write_atomic(os.path.join(tmp, "r.html"), "x")
        assert caught.value.filename == os.path.join(tmp, "r.html")
        os.chmod(tmp, 0o755)


def test_no_output_may_be_an_input(tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text("{}")
    for same in (trace, tmp_path / "." / "t.json", os.path.relpath(trace)):
        with pytest.raises(UserError, match="input"):
            files.not_an_input(same, [str(trace)])
    with pytest.raises(UserError, match="input"):
        files.not_an_input(trace, [str(tmp_path)])  # a trace in a folder of inputs
    files.not_an_input(tmp_path / "t.html", [str(trace)])
