"""`--json` prints through report.json_view alone: no rich, no text views in the process (rich is ~2 MB
resident, a tenth of what analyzing a 50 MB trace holds), and the text view still draws with them."""

from __future__ import annotations

import json
import subprocess
import sys

from support import h200_trace

_MAIN_THEN_MODULES = """
import contextlib, io, json, sys
from attnprof.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(sys.argv[1:])
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "rich" or m == "attnprof.report.terminal")
print(json.dumps({"code": code, "out": out.getvalue(), "loaded": loaded}))
"""


def _run_main(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", _MAIN_THEN_MODULES, *args], capture_output=True, text=True,
                          timeout=120, check=True)
    return json.loads(proc.stdout)


def test_analyze_json_imports_no_rich():
    trace = str(h200_trace("sdpa-flash"))
    shown = _run_main("analyze", trace, "--json")
    assert shown["code"] == 0 and shown["loaded"] == []
    assert json.loads(shown["out"])["schema"].startswith("attnprof.analysis")
    text = _run_main("analyze", trace)
    assert text["code"] == 0 and "rich" in text["loaded"] and "attnprof.report.terminal" in text["loaded"]
