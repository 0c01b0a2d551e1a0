"""`attnprof ... | head`: a reader that goes away early costs no traceback, no `Broken pipe` line, no
half-written file, and the exit status stays the command's own."""

from __future__ import annotations

from support import attnprof_into_closed_pipe, h200_trace


def test_list_json_into_a_closed_pipe_exits_0_quietly():
    proc = attnprof_into_closed_pipe("list", "--json", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    assert "Broken pipe" not in proc.stderr and "Traceback" not in proc.stderr and "Exception" not in proc.stderr


def test_analyze_html_into_a_closed_pipe_still_writes_the_whole_page(tmp_path):
    page = tmp_path / "a.html"
    proc = attnprof_into_closed_pipe("analyze", "--html", str(page), str(h200_trace("naive")))
    assert proc.returncode == 0, proc.stderr
    assert "Broken pipe" not in proc.stderr and "Traceback" not in proc.stderr
    assert page.read_text().rstrip().endswith("</html>")
