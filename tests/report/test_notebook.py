"""What the Python API returns shows itself as a table in a notebook, and stays the plain result dict."""

from __future__ import annotations

import json

import attnprof
from attnprof.report.notebook import Result
from support import h200_trace


def test_an_analysis_renders_its_facts_kernels_and_findings():
    result = attnprof.analyze(h200_trace("naive"))
    assert isinstance(result, Result) and json.loads(json.dumps(result)) == dict(result)
    page = result._repr_html_()
    assert page.startswith("<table>") and "gpu_ops" in page and "hidden-copy" in page and "Memcpy" in page


def test_a_run_renders_one_row_per_variant_and_escapes_text():
    run = Result({"schema": "attnprof.run/1", "problem": {"batch": 1}, "device": {"type": "cpu", "name": "<cpu>"},
                  "variants": [{"name": "naive<script>", "status": "ok",
                                "device_us": {"median": 10.0, "p25": 9.0, "p75": 11.0},
                                "per_forward": {"aten_ops": 12}, "findings": []}]})
    page = run._repr_html_()
    assert "naive&lt;script&gt;" in page and "<script>" not in page and "&lt;cpu&gt;" in page
    assert "time/call" in page and "10 (9–11) µs" in page


def test_lint_renders_findings_by_line():
    report = Result({"schema": "attnprof.lint/1", "target": "m.py:make", "device": "cpu", "findings": [
        {"id": "layout-copy", "severity": "info", "message": "layout copy", "file": "m.py", "line": 7,
         "code": "q @ k", "fix": "sdpa"}]})
    assert "m.py:7" in report._repr_html_() and "layout-copy" in report._repr_html_()
