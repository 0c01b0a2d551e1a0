"""`patch --write` never corrupts the user's source: the rewritten file parses (or the patch refuses),
its bytes stay its bytes (line endings, BOM, coding line, tabs, no final newline), `.orig` is the
original, and a file that is read-only, backed up already, or changed since it ran is left alone."""

from __future__ import annotations

import ast
import os
import stat
import subprocess
import sys

import pytest
import torch

from attnprof.fix import edits as source_edits
from attnprof.fix import source_io
from attnprof.fix.inplace import plan as inplace
from attnprof.fix.source_io import PatchRefused
from attnprof.fix.target import TargetError, load_target
from support import assert_one_line_error

MODEL = """import torch


class M(torch.nn.Module):
    def forward(self, q, k, m):
        att = q @ k.transpose(-2, -1)
{statement}
        return att.softmax(-1)


def make():
    torch.manual_seed(0)
    q, k = torch.randn(2, 4, 4), torch.randn(2, 4, 4)
    return M(), (q, k, torch.ones(4, 4).triu(1).bool())
"""
PLAIN = "        att = att.masked_fill(m, float('-inf'))"


def model(tmp_path, statement: str = PLAIN, newline: str = "\n", head: bytes = b"", encoding: str = "utf-8",
          final_newline: bool = True):
    text = MODEL.format(statement=statement)
    text = text if final_newline else text.rstrip("\n")
    path = tmp_path / "attn.py"
    path.write_bytes(head + text.replace("\n", newline).encode(encoding))
    return path


def patched(path) -> bytes:
    """Plan, check and write the patch of `path`; its new bytes."""
    edits = inplace.plan(load_target(f"{path}:make"))
    assert [e.safe for e in edits] == [True], [e.reason for e in edits]
    source_io.write(source_edits.patched_sources(edits))
    return path.read_bytes()


def same_outputs(path) -> None:
    """The patched module computes what the original (its `.orig` bytes) computed."""
    with torch.no_grad():
        after = load_target(f"{path}:make")()
        before = load_target(f"{path}:make", source=(path.parent / "attn.py.orig").read_bytes())()
    torch.testing.assert_close(after, before)


@pytest.mark.parametrize("statement,expected", [
    ("        att = (att.masked_fill(m, float('-inf')))", "        (att.masked_fill_(m, float('-inf')))"),
    ("        att = att.masked_fill(\n            m, float('-inf')\n        )",
     "        att.masked_fill_(\n            m, float('-inf')\n        )"),
    ("        att = (att\n               .masked_fill(m, float('-inf')))",
     "        (att\n               .masked_fill_(m, float('-inf')))"),
    ("        att = \\\n            att.masked_fill(m, float('-inf'))",
     "        \\\n            att.masked_fill_(m, float('-inf'))"),
    ("        att  =  att.masked_fill(m, float('-inf'))  # keep", "        att.masked_fill_(m, float('-inf'))  # keep"),
])
def test_wrapped_statements_become_in_place_and_still_parse(tmp_path, statement, expected):
    path = model(tmp_path, statement)
    new = patched(path).decode()
    ast.parse(new)
    assert new == MODEL.format(statement=expected)
    same_outputs(path)


def test_a_new_name_keeps_its_assignment(tmp_path):
    path = model(tmp_path, "        masked = att.masked_fill(m, float('-inf'))")
    path.write_text(path.read_text().replace("return att.softmax", "return masked.softmax"))
    new = patched(path).decode()
    assert "        masked = att.masked_fill_(m, float('-inf'))\n        return masked.softmax(-1)\n" in new
    same_outputs(path)


@pytest.mark.parametrize("newline", ["\r\n", "\r"])
def test_line_endings_are_kept_and_orig_is_the_original_bytes(tmp_path, newline):
    path = model(tmp_path, newline=newline)
    original = path.read_bytes()
    new = patched(path)
    assert new == original.replace(b"att = att.masked_fill(", b"att.masked_fill_(")
    assert (tmp_path / "attn.py.orig").read_bytes() == original


def test_a_bom_a_coding_line_tabs_and_no_final_newline_are_kept(tmp_path):
    text = MODEL.format(statement=PLAIN).replace("        ", "\t\t").replace("    ", "\t").rstrip("\n")
    text = "# -*- coding: latin-1 -*-\n# café\n" + text
    path = tmp_path / "attn.py"
    path.write_bytes(text.encode("latin-1"))
    original = path.read_bytes()
    new = patched(path)
    assert new == original.replace(b"att = att.masked_fill(", b"att.masked_fill_(")
    bom = model(tmp_path, head=b"\xef\xbb\xbf", final_newline=False)
    (tmp_path / "attn.py.orig").unlink()
    original = bom.read_bytes()
    assert patched(bom) == original.replace(b"att = att.masked_fill(", b"att.masked_fill_(")


def test_a_form_feed_does_not_shift_the_lines(tmp_path):
    path = model(tmp_path, "        \x0c\n" + PLAIN)
    assert b"\x0c\n        att.masked_fill_(m" in patched(path)


def test_bom_and_coding_line_targets_load(tmp_path):
    bom = model(tmp_path, head=b"\xef\xbb\xbf")
    assert load_target(f"{bom}:make").digest
    latin = tmp_path / "latin.py"
    latin.write_bytes("# coding: latin-1\nNAME = 'café'\n".encode("latin-1") + MODEL.format(statement=PLAIN).encode())
    assert load_target(f"{latin}:make").fn is not None


def test_an_unreadable_target_names_the_file(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_bytes(b"x = '\xff'\n")
    with pytest.raises(TargetError, match="bad.py"):
        load_target(f"{bad}:make")


def test_a_read_only_file_is_not_replaced(tmp_path):
    path = model(tmp_path)
    path.chmod(0o444)
    before = (path.read_bytes(), os.stat(path))
    edits = inplace.plan(load_target(f"{path}:make"))
    with pytest.raises(PatchRefused, match="read-only"):
        source_io.write(source_edits.patched_sources(edits))
    after = os.stat(path)
    assert path.read_bytes() == before[0] and (after.st_ino, after.st_mode) == (before[1].st_ino, before[1].st_mode)
    assert not (tmp_path / "attn.py.orig").exists()


def test_the_cli_refuses_a_read_only_file_in_one_line(tmp_path):
    path = model(tmp_path)
    path.chmod(0o444)
    proc = subprocess.run([sys.executable, "-m", "attnprof", "patch", f"{path}:make", "--write", "--device", "cpu"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert_one_line_error(proc, "read-only", "attn.py")
    assert "wrote" not in proc.stdout
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o444


def test_an_existing_backup_is_never_overwritten(tmp_path):
    path = model(tmp_path)
    (tmp_path / "attn.py.orig").write_bytes(b"my only original")
    edits = inplace.plan(load_target(f"{path}:make"))
    with pytest.raises(PatchRefused, match="already exists"):
        source_io.write(source_edits.patched_sources(edits))
    assert (tmp_path / "attn.py.orig").read_bytes() == b"my only original"
    assert b"att = att.masked_fill(" in path.read_bytes()


def test_a_failure_between_the_two_writes_leaves_nothing_stale(tmp_path, monkeypatch):
    path = model(tmp_path)
    original = path.read_bytes()
    sources = source_edits.patched_sources(inplace.plan(load_target(f"{path}:make")))
    real_write = source_io.write_atomic

    def disk_full_on_the_source(target, data, **kw):
        if not str(target).endswith(".orig"):
            raise OSError(28, "No space left on device", str(target))
        return real_write(target, data, **kw)

    monkeypatch.setattr(source_io, "write_atomic", disk_full_on_the_source)
    with pytest.raises(PatchRefused, match="No space left"):
        source_io.write(sources)
    assert path.read_bytes() == original and not (tmp_path / "attn.py.orig").exists()


def test_written_files_keep_the_mode_and_the_backup_takes_it(tmp_path):
    path = model(tmp_path)
    path.chmod(0o640)
    patched(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert stat.S_IMODE(os.stat(tmp_path / "attn.py.orig").st_mode) == 0o640


SELF_EDITING = """
def make():
    import pathlib
    made = _make()
    here = pathlib.Path(__file__)
    here.write_text(here.read_text().replace("# line", "x = 1\\n# line"))
    return made
"""


def test_a_file_that_changed_since_it_ran_is_refused(tmp_path):
    path = model(tmp_path)
    path.write_text(path.read_text().replace("def make():", "# line\ndef _make():") + SELF_EDITING)
    target = load_target(f"{path}:make")  # the factory edits its own file after it was compiled
    with pytest.raises(PatchRefused, match="changed since it was profiled"):
        inplace.plan(target)
    assert not (tmp_path / "attn.py.orig").exists()


def test_a_rewrite_that_would_not_parse_is_refused_before_writing(tmp_path):
    path = model(tmp_path)
    edits = inplace.plan(load_target(f"{path}:make"))
    broken = [source_edits.Edit(e.file, e.line, e.code, True, e.reason, e.span, "att.masked_fill_(", e.digest)
              for e in edits]
    with pytest.raises(PatchRefused, match="would not parse"):
        source_edits.patched_sources(broken)
    with pytest.raises(PatchRefused, match="would not parse"):
        source_io.write({str(path): (path.read_text(), "def broken(:\n")})
    assert b"att = att.masked_fill(" in path.read_bytes() and not (tmp_path / "attn.py.orig").exists()
