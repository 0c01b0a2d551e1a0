"""The run's progress line says which variant of how many it is on."""

from __future__ import annotations

from attnprof.report.terminal import RunProgress, console


def test_run_progress_shows_n_of_m_variants():
    progress = RunProgress(console(), quiet=True)
    problem = {"batch": 1, "heads": 2, "seq": 64, "head_dim": 32, "dtype": "bf16", "causal": True}
    progress.update("run_dir", {"path": "/tmp/x", "device": {"type": "cpu", "name": "cpu", "torch": "2"},
                                "problem": problem, "variants": ["naive", "inplace", "sdpa-math"]})
    progress.update("start", {"name": "inplace"})
    assert progress._progress.tasks[0].description == "measuring inplace (2 of 3)"
    progress.update("done", {"name": "sdpa-math"})
    assert progress._progress.tasks[0].description == "profiled sdpa-math (3 of 3)"
