"""attnprof's split-KV decode and masked forward (windows, causal either way, packed batches, documents)
against float64 under Triton's interpreter, and the flash-attn calls' refusals and split counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnprof.kernels import import_from_folder  # noqa: E402

CASES = Path(__file__).with_name("interpreted_masks_decode.py")
FP16_TOLERANCE = 2e-3  # float16 output rounding is ~5e-4 at these magnitudes


@pytest.fixture(scope="module")
def interpreted() -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, str(CASES)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_decode_over_ragged_caches_matches_float64_with_and_without_splits(interpreted):
    assert len(interpreted["decode"]) == 8
    for case, error in interpreted["decode"].items():
        assert error < FP16_TOLERANCE, case


def test_new_keys_are_appended_to_the_cache_and_attended_to(interpreted):
    assert interpreted["append"] < FP16_TOLERANCE


def test_windows_either_alignment_and_unequal_lengths_match_float64(interpreted):
    assert len(interpreted["windows"]) == 6
    for case, error in interpreted["windows"].items():
        assert error < FP16_TOLERANCE, case


def test_packed_batches_and_documents_match_each_sequence_alone(interpreted):
    assert len(interpreted["varlen"]) == 4
    for case, error in interpreted["varlen"].items():
        assert error < FP16_TOLERANCE, case


def test_masked_gradients_match_float64(interpreted):
    for name, relative_error in interpreted["gradients"].items():
        assert relative_error < 1e-2, name


@pytest.mark.parametrize("call, arguments, named", [
    ("flash_attn_with_kvcache", {"block_table": torch.zeros(1, 1, dtype=torch.int32), "softcap": 30.0},
     "block_table, softcap"),
    ("flash_attn_with_kvcache", {"rotary_cos": torch.zeros(1)}, "rotary_cos"),
    ("flash_attn_varlen_func", {"dropout_p": 0.1}, "dropout_p"),
])
def test_flash_attn_arguments_it_does_not_implement_are_named_in_the_error(call, arguments, named):
    module = import_from_folder()
    q = torch.zeros(1, 4, 2, 64, dtype=torch.float16)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    positional = (q, q, q) if call == "flash_attn_with_kvcache" else (q[0], q[0], q[0], cu, cu, 4, 4)
    with pytest.raises(NotImplementedError, match=f"does not support {named}$"):
        getattr(module, call)(*positional, **arguments)


def test_splits_fill_the_sms_but_never_cut_a_sequence_below_the_minimum_split():
    decode = import_from_folder().decode
    assert decode.num_splits(units=64, max_keys=8192, programs=264) == 4  # B8 x 8 KV heads, 132 SMs x 2
    assert decode.num_splits(units=64, max_keys=512, programs=264) == 512 // decode.MIN_SPLIT_KEYS
    assert decode.num_splits(units=1024, max_keys=8192, programs=264) == 1  # enough programs already
    assert decode.num_splits(units=1, max_keys=1 << 20, programs=264) == decode.MAX_SPLITS
