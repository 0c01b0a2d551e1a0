"""The Python API checks its arguments before any work: a string of variants is those variants, a
variant named twice, a count below one or CUDA without a GPU is a clear ValueError."""

from __future__ import annotations

import pytest
import torch

import attnprof
from attnprof.api import _variant_names


def test_a_string_is_one_variant_or_a_comma_separated_list():
    assert _variant_names("naive", False) == ("naive",)
    assert _variant_names("naive, sdpa-math", False) == ("naive", "sdpa-math")
    assert _variant_names(None, True) == ()


@pytest.mark.parametrize("kwargs,words", [
    ({"variants": ["naive", "naive"]}, "'naive' named more than once"),
    ({"variants": "warp-speed"}, "unknown variant 'warp-speed'"),
    ({"variants": ["naive"], "repeats": 0}, "repeats must be a whole number >= 1, got 0"),
    ({"variants": ["naive"], "repeats": 2.5}, "repeats"),
    ({"variants": ["naive"], "warmup": -1}, "warmup"),
])
def test_bad_arguments_fail_before_any_work(tmp_path, kwargs, words):
    with pytest.raises(ValueError, match=words):
        attnprof.run(**kwargs, out=tmp_path, device="cpu")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU behaviour")
def test_cuda_without_a_gpu_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no CUDA GPU"):
        attnprof.run(["naive"], device="cuda", out=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_run_with_one_variant_as_a_string_runs_it(tmp_path):
    results = attnprof.run("naive", batch=1, heads=1, seq=32, head_dim=16, device="cpu", out=tmp_path, repeats=3)
    assert [v["name"] for v in results["variants"]] == ["naive"] and results["variants"][0]["status"] == "ok"
