"""hidden-copy in a training step: the forward's out-of-place masked_fill is named, the copy autograd's
MaskedFillBackward0 makes is not (the in-place fix is the forward's, not the backward's)."""

from __future__ import annotations

from attnprof.api import analyze
from support import H200


def _copies(finding: dict) -> list[dict]:
    return finding["evidence"]["copies"]


def test_a_training_step_counts_only_the_forwards_hidden_copy():
    step = analyze(H200 / "train_4_16_1024_64_bf16_naive.json.gz")
    assert step["unit"] == "step"
    found = next(f for f in step["findings"] if f["id"] == "hidden-copy")
    assert [c["per_forward"] for c in _copies(found)] == [1.0]
    assert _copies(found)[0]["in_place_form"] == "aten::masked_fill_"


def test_the_backward_copy_is_still_in_the_step_and_explained_as_autograds():
    from attnprof.analysis import copies
    from attnprof.analysis.attribution import analyze_trace
    from attnprof.trace.reader import load

    a = analyze_trace(load(H200 / "train_4_16_1024_64_bf16_naive.json.gz"))
    kinds = [copies.explained_kind(a, cp) for cp in copies.copies(a) if cp.tail.startswith("Memcpy DtoD")]
    assert sorted(kinds) == ["backward"] * len(a.forwards) + ["hidden"] * len(a.forwards)


def test_a_training_steps_findings_speak_of_steps_and_a_forwards_of_forwards():
    step = analyze(H200 / "train_4_16_1024_64_bf16_naive.json.gz")
    forward = analyze(H200 / "8_16_1024_64_bf16_naive.json.gz")
    step_text = " ".join(f["message"] + (f["fix"] or "") for f in step["findings"])
    assert "per step" in step_text and "per forward" not in step_text
    assert "per forward" in " ".join(f["message"] for f in forward["findings"])
