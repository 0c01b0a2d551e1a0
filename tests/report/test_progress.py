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


def test_with_stderr_not_a_terminal_the_bar_leaves_no_blank_line():
    import subprocess
    import sys

    code = ("import sys\nfrom attnprof.report.terminal import RunProgress, console\n"
            "p = {'batch': 1, 'heads': 2, 'seq': 64, 'head_dim': 32, 'dtype': 'bf16'}\n"
            "with RunProgress(console()) as progress:\n"
            "    progress.update('run_dir', {'path': 'x', 'device': {'type': 'cpu', 'name': 'c', 'torch': '2'},"
            " 'problem': p, 'variants': ['naive']})\n"
            "    progress.update('start', {'name': 'naive'})\n"
            "print('after', file=sys.stderr)\n")
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stderr
    assert err.splitlines() == ["attnprof: B=1 H=2 S=64 D=32 bf16 on cpu (c), torch 2", "after"]
