"""A small Llama trains on the kernel under Triton's interpreter: through transformers' hub-kernel path
(attn_implementation naming the kernel, LOCAL_KERNELS mapping it to its folder) where this transformers
accepts the installed `kernels`, and through AttentionInterface with the module `kernels` loaded."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

from support import run_interpreted  # noqa: E402

SCRIPT = Path(__file__).with_name("interpreted_llama.py")
# looked up, not imported: only the script's process uses them, and importing transformers here cost each
# pytest-xdist worker ~1.2 s of collection
MISSING = [name for name in ("transformers", "kernels") if find_spec(name) is None]
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"needs {MISSING}")


@pytest.fixture(scope="module")
def llama_errors() -> dict:
    """Every way at once: one process (transformers' import is most of each run's time)."""
    return run_interpreted(SCRIPT, "registered", "hub", "repo")


def _assert_close_to_sdpa(errors: dict) -> None:
    if "skipped" in errors:  # e.g. transformers 5.24 wants kernels >= 0.18.2
        pytest.skip(errors["skipped"])
    assert errors["logits"] < 5e-3 * errors["logits_scale"]  # float16: measured 7e-4 of the scale
    assert errors["grad"] < 1e-2 * errors["grad_scale"]


@pytest.mark.slow
def test_a_llama_registered_with_the_kernels_transformers_attention_matches_sdpa(llama_errors):
    _assert_close_to_sdpa(llama_errors["registered"])


@pytest.mark.slow
def test_a_llama_on_transformers_hub_kernel_path_matches_sdpa(llama_errors):
    _assert_close_to_sdpa(llama_errors["hub"])


@pytest.mark.slow
def test_a_padded_llama_on_attn_implementation_naming_the_repo_matches_sdpa(llama_errors):
    """attn_implementation="<org>/<repo>": transformers' own flash-attention wrapper around the exported
    flash_attn_varlen_func, on a batch with a left-padded row."""
    errors = llama_errors["repo"]
    _assert_close_to_sdpa(errors)
    assert errors["varlen_calls"] == 2  # one a layer: the padded batch went through the varlen kernel
