"""Keep it fixed: `attnprof.expect` budgets and the `kernel_budget` pytest fixture."""

from __future__ import annotations

import pytest
import torch

import attnprof
from attnprof.fix import edits as source_edits
from attnprof.fix.inplace import plan as inplace
from attnprof.fix.target import load_target
from support import FIXTURES

GPT = f"{FIXTURES / 'user_models' / 'gpt_attention.py'}:make"


@pytest.fixture(autouse=True)
def no_grad():
    with torch.no_grad():
        yield


@pytest.fixture(scope="module")
def before_after():
    """The GPT fixture and its source-patched twin (same weights), warmed up."""
    original = load_target(GPT)
    [new] = [new for _, new in source_edits.patched_sources(inplace.plan(original)).values()]
    patched = load_target(GPT, source=new)
    patched.fn.load_state_dict(original.fn.state_dict())
    with torch.no_grad():
        original(), patched()
    return original, patched


def test_forbidden_hidden_copy_fails_the_original_and_passes_the_patch(before_after):
    original, patched = before_after
    with pytest.raises(AssertionError) as caught, attnprof.expect(forbid=["hidden-copy"]):
        original()
    message = str(caught.value)
    assert "forbidden finding hidden-copy" in message and "aten::masked_fill" in message
    assert "hidden-copy in " in message and "gpt_attention.py:" in message
    assert "masked_fill(" in message.split("hidden-copy in ", 1)[1].splitlines()[0]  # the line, not `def forward`
    with attnprof.expect(forbid=["hidden-copy"]):
        patched()


def test_a_nanogpt_block_fixed_the_articles_way_passes_a_hidden_copy_budget():
    block = load_target(f"{FIXTURES / 'user_models' / 'nanogpt_inplace.py'}:make")
    block()  # warm-up: first-call allocations are not the forward's
    with attnprof.expect(forbid=["hidden-copy"]):
        block()
    with pytest.raises(AssertionError, match="forbidden finding layout-copy"), attnprof.expect(
            forbid=["layout-copy"]):
        block()


def test_cpu_budgets_count_aten_ops_and_copies(before_after):
    original, patched = before_after
    with pytest.raises(AssertionError, match=r"copies: \d+ > 0"), attnprof.expect(max_copies=0):
        original()
    with pytest.raises(AssertionError, match=r"aten ops: \d+ > 5"), attnprof.expect(max_aten_ops=5):
        patched()
    with attnprof.expect(max_aten_ops=10_000, max_copies=100):
        patched()


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU behaviour")
def test_gpu_limits_on_cpu_warn_instead_of_failing(before_after):
    with pytest.warns(UserWarning, match="GPU limits are not checked"), attnprof.expect(max_gpu_ops=1,
                                                                                        forbid=["memcpy"]):
        before_after[0]()


def test_unknown_forbidden_names_fail_before_the_block_runs():
    ran = []
    with pytest.raises(ValueError, match="hiden-copy"), attnprof.expect(forbid=["hiden-copy"]):
        ran.append(1)
    assert not ran


def test_an_error_in_the_block_propagates():
    with pytest.raises(ZeroDivisionError), attnprof.expect(max_copies=0):
        1 / 0  # noqa: B018


def test_kernel_budget_fixture(kernel_budget, before_after):
    with kernel_budget(forbid=["hidden-copy"], max_copies=100):
        before_after[1]()


@pytest.mark.cuda
def test_gpu_budget_sees_the_memcpy():
    original = load_target(GPT).to("cuda")
    [new] = [new for _, new in source_edits.patched_sources(inplace.plan(original)).values()]
    patched = load_target(GPT, source=new).to("cuda")
    original(), patched()
    with pytest.raises(AssertionError, match="forbidden memcpy"), attnprof.expect(forbid=["memcpy"]):
        original()
    with attnprof.expect(forbid=["memcpy", "hidden-copy"]):
        patched()
