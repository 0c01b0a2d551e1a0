"""The history's views: terminal lines of runs and verdicts, the HTML page with its plots over runs."""

from __future__ import annotations

from rich.console import Console

from attnprof.history import compare_runs, history, record
from attnprof.report.history import render_compare, render_history
from attnprof.report.history_page import history_plots, write_history_page


def _row(name: str, median: float, kernels: int = 5) -> dict:
    return {"name": name, "problem": "1_2_64_16_bf16", "status": "ok", "reason": None,
            "device_us": {"median": median, "p25": median - 1, "p75": median + 1, "method": "cuda-graph"},
            "gpu_ops": kernels + 1, "kernels": kernels, "findings": []}


def _run(*rows: dict, torch: str = "2.10.0", host: str = "ci-1") -> dict:
    return {"time": "2026-11-30T10:00:00Z", "command": "attnprof run", "kind": "run",
            "device": {"type": "cuda", "name": "NVIDIA H200"}, "device_kind": "cuda:NVIDIA H200",
            "problem": "1_2_64_16_bf16", "environment": {"torch": torch, "hostname": host}, "run_dir": None,
            "variants": list(rows)}


def _text(render, result) -> str:
    out = Console(record=True, width=200)
    render(result, out)
    return out.export_text()


def _store(tmp_path):
    db = tmp_path / "history.sqlite"
    record(_run(_row("naive", 100.0), _row("flash", 10.0)), db)
    record(_run(_row("naive", 100.0, kernels=6), _row("flash", 10.0), torch="2.11.0", host="ci-2"), db)
    return db


def test_history_in_the_terminal_names_each_run_and_what_changed(tmp_path):
    text = _text(render_history, history(_store(tmp_path)))
    assert "run 2" in text and "run 1" in text
    assert ("changed since run 1: hostname ci-1 -> ci-2; torch 2.10.0 -> 2.11.0; "
            "naive gpu_ops 6 -> 7; naive kernels 5 -> 6") in text


def test_compare_in_the_terminal_shows_the_verdict_and_the_environment_change(tmp_path):
    text = _text(render_compare, compare_runs(_store(tmp_path)))
    assert "changed: torch 2.10.0 -> 2.11.0" in text
    assert "regressed" in text.splitlines()[-1]
    naive = next(line for line in text.splitlines() if "naive" in line)
    assert "regressed" in naive and "more gpu_ops (6 -> 7), kernels (5 -> 6)" in naive


def test_the_history_page_marks_a_torch_change_but_not_a_new_ci_host(tmp_path):
    runs = history(_store(tmp_path))["runs"]
    [plot] = history_plots(runs)
    assert plot["title"] == "Device time per forward, 1_2_64_16_bf16 on cuda:NVIDIA H200"
    assert " torch<" in plot["svg"] and "hostname" not in plot["svg"]
    page = write_history_page({"store": "s", "runs": runs}, tmp_path / "h.html").read_text()
    assert page.count("<svg") == 1 and "Runs, newest first" in page


def test_a_history_without_times_draws_no_plot(tmp_path):
    db = tmp_path / "history.sqlite"
    record(_run({**_row("target", 1.0), "device_us": None}), db)
    assert history_plots(history(db)["runs"]) == []


def test_names_from_outside_print_as_written_never_as_markup_or_control_codes(tmp_path):
    db = tmp_path / "history.sqlite"
    name = "[red]mine[/]\x1b[2J"
    record(_run(_row(name, 10.0)), db)
    record(_run(_row(name, 10.0)), db)
    for text in (_text(render_history, history(db)), _text(render_compare, compare_runs(db))):
        assert "[red]mine[/]\\x1b[2J" in text and "\x1b" not in text


def test_a_training_step_s_counts_read_per_step(tmp_path):
    db = tmp_path / "history.sqlite"
    step = {**_row("naive", 100.0), "problem": "1_2_64_16_bf16_train"}
    record({**_run(step), "problem": "1_2_64_16_bf16_train"}, db)
    record(_run(_row("naive", 100.0)), db)
    text = _text(render_history, history(db))
    assert "6 ops/step" in text and "6 ops/fwd" in text
