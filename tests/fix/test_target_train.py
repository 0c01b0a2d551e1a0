"""`run --mode train --target`: a whole model's training step differentiates a loss against the model's own
parameters (a layer's step differentiates against q, k and v, which a model never takes)."""

from __future__ import annotations

import pytest

from support import FIXTURES

MODELS = FIXTURES / "user_models"


def _train(tmp_path, target, inputs=None) -> dict:
    import attnprof

    results = attnprof.run(device="cpu", repeats=2, warmup=1, mode="train", out=tmp_path, target=target,
                           inputs=inputs)
    [record] = results["variants"]
    return record


def test_a_transformers_model_trains_its_parameters(tmp_path):
    pytest.importorskip("transformers")
    record = _train(tmp_path, f"{MODELS / 'tiny_llama.py'}:make_sdpa")
    assert record["status"] == "ok", record["reason"]
    assert record["unit"] == "step" and record["phases"]["backward"]["aten_ops"] > 0


def test_a_target_without_parameters_is_refused_with_its_reason(tmp_path):
    import torch

    record = _train(tmp_path, lambda x: torch.softmax(x, -1), inputs=(torch.randn(2, 8),))
    assert record["status"] == "error" and "no parameters that require grad" in record["reason"]
