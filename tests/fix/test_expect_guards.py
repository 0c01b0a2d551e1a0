"""attnprof.expect and kernel_budget: blocks that would nest are refused (a second profiler crashed the
process, and pytest with it), and every argument is checked before the block runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

import attnprof

NESTED = textwrap.dedent("""
    import pytest
    import torch

    import attnprof

    X = torch.randn(8, 8)


    def test_expect_inside_kernel_budget(kernel_budget):
        with pytest.raises(RuntimeError, match="cannot nest"), kernel_budget(max_copies=10):
            with attnprof.expect(max_copies=10):
                X @ X


    def test_expect_inside_expect_and_inside_torch_profiler():
        for outer in (attnprof.expect(max_copies=10), torch.profiler.profile()):
            with pytest.raises(RuntimeError, match="cannot nest"), outer, attnprof.expect(max_copies=10):
                X @ X


    def test_a_budget_after_them_still_works(kernel_budget):
        with kernel_budget(max_copies=10):
            X @ X
""")


def test_nested_budgets_are_refused_not_a_crash(tmp_path):
    (tmp_path / "test_nested.py").write_text(NESTED)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "3 passed" in proc.stdout


@pytest.mark.parametrize("limits,words", [
    ({"max_aten_ops": float("nan")}, "max_aten_ops must be a whole number >= 0, got nan"),
    ({"max_copies": -1}, "max_copies"),
    ({"max_gpu_ops": 2.5}, "max_gpu_ops"),
    ({"max_kernels": "6"}, "max_kernels"),
    ({"max_copies": True}, "max_copies"),
    ({"device": "gpu"}, "device"),
])
def test_bad_arguments_fail_before_the_block_runs(limits, words):
    ran = []
    with pytest.raises(ValueError, match=words), attnprof.expect(**limits):
        ran.append(1)
    assert not ran


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU behaviour")
def test_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="no CUDA GPU"), attnprof.expect(device="cuda"):
        pass


def test_one_forbidden_id_as_a_string_is_that_id():
    x = torch.randn(8, 8)
    with attnprof.expect(forbid="hidden-copy", max_copies=10.0):  # a whole float is a count too
        x @ x
    with pytest.raises(ValueError, match="'hiden-copy'"), attnprof.expect(forbid="hiden-copy"):
        pass
