"""`patch --write --verify` verifies in a copy before it writes: when the outputs differ or the rewritten
forward raises, the command exits 2 with one line and the user's file is byte for byte as it was,
with no `.orig`. The checks are forced to let a rewrite through, so that --verify is what stops it."""

from __future__ import annotations

import shutil

import pytest

from attnprof.cli import main
from attnprof.fix import verify as verify_module
from support import FIXTURES

MODELS = FIXTURES / "user_models"


@pytest.fixture
def block(tmp_path, monkeypatch):
    """A block whose rewrite passes the check against the original (no dropout: nanoGPT's waits for the
    dropout module's own flag), so that --verify is what stops it."""
    shutil.copy(MODELS / "mask_in_forward.py", tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "mask_in_forward.py"


def untouched(path, before: bytes) -> bool:
    return path.read_bytes() == before and not path.with_name(path.name + ".orig").exists()


def forced(monkeypatch, compare) -> None:
    """`compare` in place of fix.verify's, which both wings' verifications call through the module."""
    monkeypatch.setattr(verify_module, "compare", compare)


def test_outputs_that_differ_under_verify_leave_the_file_as_it_was(block, monkeypatch, capsys):
    before = block.read_bytes()
    real = verify_module.compare

    def differing(*args, **kwargs):
        result = real(*args, **kwargs)
        return result | {"outputs": {"match": False, "detail": "different (max abs difference 0.92)"}}

    forced(monkeypatch, differing)
    code = main(["patch", "mask_in_forward.py:make", "--to-sdpa", "--write", "--verify", "--device", "cpu",
                 "--no-history"])
    err = capsys.readouterr().err
    assert code == 2 and untouched(block, before)
    assert err.count("\n") == 1 and "outputs different (max abs difference 0.92)" in err and "nothing written" in err


@pytest.mark.parametrize("to_sdpa", [True, False])
def test_a_rewritten_forward_that_raises_under_verify_leaves_the_file_as_it_was(block, monkeypatch, capsys,
                                                                                to_sdpa):
    def raising(*args, **kwargs):
        raise RuntimeError("expected all tensors to be on the same device")

    forced(monkeypatch, raising)
    before = block.read_bytes()
    argv = ["patch", "mask_in_forward.py:make", "--write", "--verify", "--device", "cpu", "--no-history"]
    code = main(argv + (["--to-sdpa"] if to_sdpa else []))
    err = capsys.readouterr().err
    assert code == 2 and untouched(block, before)
    assert err.count("\n") == 1 and "rewritten forward raises (RuntimeError" in err


BOTTOM_RIGHT = FIXTURES.parent / "fix" / "to_sdpa" / "corpus" / "bottom_right_from_shapes.py"


@pytest.fixture
def trusting_the_calls_seen(monkeypatch):
    """Round 2's rule forced back in: a mask equal to the causal mask at the calls seen is is_causal."""
    from attnprof.fix.to_sdpa import mask

    real = mask.decide

    def trusting(step, ctx, facts, file):
        use = real(step, ctx, facts, file)
        return mask.MaskUse(True, None, "is_causal=True: trusted") if use.causal_at_calls_seen else use

    monkeypatch.setattr(mask, "decide", trusting)


def test_a_rewrite_that_differs_on_a_variation_is_refused_before_the_diff(tmp_path, monkeypatch, capsys,
                                                                          trusting_the_calls_seen):
    """The differential check alone (no --verify): a rewrite that differs only at another length is
    refused with what differed, and nothing is written."""
    shutil.copy(BOTTOM_RIGHT, tmp_path)
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "bottom_right_from_shapes.py"
    before = path.read_bytes()
    code = main(["patch", "bottom_right_from_shapes.py:make", "--to-sdpa", "--write", "--device", "cpu",
                 "--no-history"])
    out = capsys.readouterr().out
    assert code == 0 and untouched(path, before)
    assert "left alone: checked against the original: the rewrite's output 0 differs" in out
    assert "a query of" in out


def test_the_run_time_rewrite_is_checked_too_and_taken_back_when_it_differs(trusting_the_calls_seen):
    import attnprof
    from attnprof.errors import PatchError
    from attnprof.fix.target import load_target

    target = load_target(f"{BOTTOM_RIGHT}:make")
    with pytest.raises(PatchError, match="checked against the original: the rewrite's output 0 differs"):
        attnprof.patch(target.fn, to_sdpa=True, inputs=target.inputs)
    assert "forward" not in vars(target.fn)  # the instance keeps its own method
