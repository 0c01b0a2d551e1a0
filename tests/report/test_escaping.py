"""Text from traces, torch and users is data: never rich markup, never a terminal control sequence, never
a link out of report.html, and one name cannot fill the screen."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

from rich.console import Console

from attnprof.report import terminal
from attnprof.report.html import write_report
from attnprof.report.text import NAME_LIMIT, printable, safe_text
from support import attnprof, h200_trace

HOSTILE = ["[/]", "[link=https://evil.example]click me[/link]", "\x1b[2Jcleared", "[bold red]loud[/]", "a\\"]


def shown(render, *args) -> str:
    out = io.StringIO()
    render(*args, Console(file=out, width=400, highlight=False, soft_wrap=False, color_system=None))
    return out.getvalue()


def kernel(name: str, corr: int, ts: float) -> list[dict]:
    return [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts, "dur": 1,
             "args": {"correlation": corr}},
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts + 2, "dur": 1,
             "args": {"correlation": corr}}]


def hostile_trace(tmp_path) -> str:
    events = [{"ph": "X", "cat": "user_annotation", "name": "fwd", "pid": 1, "tid": 1, "ts": 0, "dur": 100}]
    for i, name in enumerate([*HOSTILE, "k" * 5000, "emoji:smile:code"]):
        events += kernel(name, i + 1, 10 + i)
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return str(path)


def test_safe_text_keeps_the_words_and_drops_the_power():
    for text in HOSTILE:
        out = io.StringIO()
        Console(file=out, width=400, color_system=None).print(f"[bold]{safe_text(text)}[/]")
        assert out.getvalue().rstrip("\n") == printable(text)
    assert printable("\x1b[2J") == "\\x1b[2J" and printable("a\u202eb") == "a\\u202eb"
    assert len(safe_text("x" * 10_000)) == NAME_LIMIT


def test_a_newline_in_a_region_name_cannot_forge_a_line(tmp_path):
    """A region named "fwd\nno findings: all clear" prints on its one line, the newline written out."""
    name = "fwd\nno findings: all clear\r\u2028x"
    events = [{"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": 0, "dur": 100},
              *kernel("k\nforged line", 1, 10)]
    path = tmp_path / "newline.json"
    path.write_text(json.dumps({"traceEvents": events}))
    proc = subprocess.run([sys.executable, "-m", "attnprof", "analyze", str(path)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr
    lines = (proc.stdout + proc.stderr).splitlines()
    assert not any(line.startswith(("no findings", "forged line", "x")) for line in lines)
    assert "fwd\\nno findings: all clear\\r\\u2028x" in proc.stdout


def test_hostile_kernel_names_in_analyze_are_inert(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "attnprof", "analyze", hostile_trace(tmp_path)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\\x1b[2Jcleared" in proc.stdout
    assert "[/]" in proc.stdout and "[link=https://evil.example]click me[/link]" in proc.stdout
    assert "[bold red]loud[/]" in proc.stdout and "emoji:smile:code" in proc.stdout
    assert "k" * NAME_LIMIT not in proc.stdout  # capped


def test_the_bracketed_part_of_a_recorded_kernel_name_survives():
    proc = attnprof("analyze", str(h200_trace("naive")))
    assert "elementwise_kernel[masked_fill_kern" in proc.stdout


def test_the_hub_hint_keeps_its_extra():
    rows = [{"name": "hub", "family": "hub", "layout": "BHSD", "description": "a kernel from the hub",
             "runs_here": False, "reason": "kernels is not installed: pip install 'attnprof[hub]'"}]
    assert "pip install 'attnprof[hub]'" in shown(lambda r, c: terminal.render_list(r, "cpu", c), rows)


def results(name: str, run_dir: str, trace: str | None = None) -> dict:
    record = {"name": name, "status": "ok", "reason": None, "per_forward": {"aten_ops": 3}, "device_us": None,
              "max_abs_error": None, "findings": [{"id": "hidden-copy", "severity": "warn", "message": name,
                                                   "fix": "[/]"}], "trace": trace}
    return {"schema": "attnprof.run/1", "device": {"type": "cpu", "name": "\x1b[31mcpu", "torch": "2"},
            "problem": {"batch": 1, "heads": 1, "seq": 8, "head_dim": 8, "dtype": "bf16", "causal": True},
            "variants": [record], "run_dir": run_dir, "config": {"region": "fwd"}}


def test_a_run_into_a_folder_with_markup_in_its_name_prints_its_report():
    text = shown(terminal.render_run, results("mk[/]name", "out/mk[/]out/20260101_x"))
    assert "mk[/]name" in text and "out/mk[/]out/20260101_x" in text and "\x1b" not in text


def test_findings_messages_are_inert():
    findings = [{"id": "hidden-copy", "severity": "warn", "message": "copy in [/] \x1b[2J", "fix": "[link=x]y"}]
    text = shown(terminal.render_findings, findings)
    assert "copy in [/] \\x1b[2J" in text and "[link=x]y" in text


def test_a_crafted_results_json_links_nowhere_outside(tmp_path):
    for i, trace in enumerate(["https://evil.example/t.json", "//evil.example/t.json", "javascript:alert(1)",
                               "/etc/passwd", "\\\\evil.example\\share"]):
        folder = tmp_path / str(i)
        folder.mkdir()
        (folder / "results.json").write_text(json.dumps(results("v", str(folder), trace)))
        page = write_report(folder).read_text()
        assert "evil.example" not in "".join(page.split('href="')[1:]).split('"')[0]
        hrefs = [chunk.split('"', 1)[0] for chunk in page.split('href="')[1:]]
        assert all(":" not in h and not h.startswith(("/", "%2F")) for h in hrefs), hrefs
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "results.json").write_text(json.dumps(results("v", "x", "v.json.gz")))
    assert 'href="v.json.gz"' in write_report(tmp_path / "ok").read_text()


def test_plain_views_of_the_users_code_write_control_characters_out(capsys):
    from attnprof.fix.edits import Edit
    from attnprof.report.fix_views import render_patch_plan

    render_patch_plan([Edit("model.py", 3, 'x = "\x1b[2J"', False, "left alone: \x1b]8;;https://evil\x07")])
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and '"\\x1b[2J"' in out


def test_a_crafted_results_json_makes_the_report_read_no_trace_outside_its_folder(tmp_path, monkeypatch):
    from attnprof.report import timeline

    read = []
    monkeypatch.setattr(timeline, "from_traces", lambda traces, region: (read.extend(traces) or [], []))
    secret = tmp_path / "secret.json.gz"
    secret.write_bytes(b"")
    for name in (str(secret), "../secret.json.gz", "v.json.gz"):
        folder = tmp_path / "run"
        folder.mkdir(exist_ok=True)
        on_gpu = {**results("v", str(folder), name), "device": {"type": "cuda", "name": "gpu", "torch": "2"}}
        (folder / "results.json").write_text(json.dumps(on_gpu))
        write_report(folder)
    assert [path.name for _, path in read] == ["v.json.gz"]
