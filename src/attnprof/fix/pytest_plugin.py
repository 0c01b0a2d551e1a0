"""pytest plugin (entry point `attnprof`): a `kernel_budget` fixture that keeps a fix fixed.

    def test_attention_stays_lean(kernel_budget):
        model(x)  # warm up: lazy setup is not the forward's cost
        with kernel_budget(max_gpu_ops=6, forbid=["hidden-copy", "memcpy"]):
            model(x)

On a GPU the budget counts GPU activities; on the CPU aten ops and copies (GPU-only limits are
skipped with a warning), so the same test runs on CI without a GPU and on a GPU machine.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest


@pytest.fixture
def kernel_budget() -> Callable:
    """`kernel_budget(**limits)` is `attnprof.expect(**limits)`: use it as a context manager."""
    from attnprof.fix.expect import expect

    return expect
