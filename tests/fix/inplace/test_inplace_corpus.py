"""Every fixture of user code in corpus/ that masks in place is refused with its reason or rewritten to
the same outputs and gradients. The in-place rewrite has two static gates (the source proof in
fix/inplace/safety.py, the forward seen) and the check against the original (fix.differential) behind
them: with the static gates forced open, each fixture they refuse is still refused by the check.

A fixture's docstring starts with what must happen: `refused: <words of the reason>` or `rewritten`,
then, where the static gates refuse it, `forced: <words of the check's reason>`."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch

from attnprof.cli import main
from attnprof.fix.inplace import plan as inplace
from attnprof.fix.inplace import safety
from attnprof.fix.inplace.checked import checked
from attnprof.fix.target import load_target

CORPUS = Path(__file__).parent / "corpus"
FIXTURES = sorted(p.stem for p in CORPUS.glob("*.py"))


def expectation(name: str) -> dict[str, str]:
    """{"refused" or "rewritten": words, and "forced": words where the static gates refuse it}."""
    lines = (CORPUS / f"{name}.py").read_text().split("\n", 2)[:2]
    found = [ln.strip('"').partition(":") for ln in lines]
    return {verdict: words.strip() for verdict, _, words in found if verdict in ("refused", "rewritten", "forced")}


def planned(name: str):
    spec = f"{CORPUS / name}.py:make"
    return spec, checked(spec, inplace.plan(load_target(spec)), "cpu")


@pytest.fixture
def static_gates_open(monkeypatch):
    """The source proof and the run-time observation both forced to call every fill safe."""
    monkeypatch.setattr(safety, "judge", lambda fn, stmt: safety.Verdict(True, "trusted"))
    monkeypatch.setattr(inplace, "_note", lambda obs, x, out: None)


@pytest.mark.parametrize("name", FIXTURES)
def test_each_fixture_is_refused_with_its_reason_or_rewritten_to_the_same_outputs(name):
    expected = expectation(name)
    spec, (edits, sources, cases) = planned(name)
    assert len(edits) == 1, [e.reason for e in edits]
    if "refused" in expected:
        assert not sources and not edits[0].safe and expected["refused"] in edits[0].reason, edits[0].reason
        return
    assert edits[0].safe and "the calls seen" in cases["inputs"], edits[0].reason
    (old, new), = sources.values()
    assert new.count("masked_fill_(") == 1 and old.count("masked_fill_(") == 0
    before, after = load_target(spec, source=old), load_target(spec, source=new)
    after.fn.load_state_dict(before.fn.state_dict())
    for inputs in (before.inputs, tuple(t.flip(-2) for t in before.inputs)):  # a second call, other values
        for a, b in zip(run(before.fn, inputs), run(after.fn, inputs), strict=True):
            torch.testing.assert_close(b, a)


@pytest.mark.parametrize("name", [n for n in FIXTURES if "forced" in expectation(n)])
def test_with_the_static_gates_forced_open_the_check_against_the_original_refuses(name, static_gates_open):
    _, (edits, sources, _) = planned(name)
    [edit] = edits
    assert not sources and not edit.safe, edit.reason
    assert edit.reason.startswith("checked against the original: ") and expectation(name)["forced"] in edit.reason


def run(fn, inputs: tuple) -> list:
    """Outputs, the gradients of the inputs and parameters, and the inputs and buffers after the call."""
    leaves = tuple(t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs)
    out = fn(*leaves)
    outs = list(out) if isinstance(out, tuple) else [out]
    sum(o.sum() for o in outs).backward()
    grads = [t.grad for t in leaves if t.requires_grad] + [p.grad for p in fn.parameters()]
    return [o.detach() for o in outs] + grads + [t.detach() for t in leaves] + list(fn.buffers())


def untouched(path: Path, before: bytes) -> bool:
    return path.read_bytes() == before and not path.with_name(path.name + ".orig").exists()


@pytest.fixture
def copied(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def copy(name: str) -> Path:
        return Path(shutil.copy(CORPUS / f"{name}.py", tmp_path))

    return copy


def test_write_leaves_a_rewrite_the_check_refuses_out_and_the_file_as_it_was(copied, capsys):
    path = copied("cached_tensor_across_calls")
    before = path.read_bytes()
    code = main(["rewrite", f"{path.name}:make", "--write", "--device", "cpu", "--no-history"])
    out = capsys.readouterr().out
    assert code == 0 and untouched(path, before)
    assert "left alone: checked against the original: the rewrite's output 0 differs" in out


def test_write_verify_with_nothing_that_passed_is_one_line_exit_2_and_the_file_as_it_was(copied, capsys):
    path = copied("autograd_needs_unmasked")
    before = path.read_bytes()
    code = main(["patch", f"{path.name}:make", "--write", "--verify", "--device", "cpu", "--no-history"])
    err = capsys.readouterr().err
    assert code == 2 and untouched(path, before)
    assert err.count("\n") == 1 and "no safe rewrite to verify" in err


def test_a_rewrite_that_passes_says_what_it_was_checked_on_and_is_written(copied, capsys):
    path = copied("fresh_scores")
    code = main(["rewrite", f"{path.name}:make", "--write", "--device", "cpu", "--no-history"])
    out = capsys.readouterr().out
    assert code == 0 and "att.masked_fill_(" in path.read_text()
    assert "checked against the original (same weights, in float64): outputs and gradients equal" in out
    assert "inputs tried: the calls seen;" in out


def test_a_fill_in_another_user_file_is_refused_as_it_cannot_be_checked_in_a_copy(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "masking_helper", raising=False)
    (tmp_path / "masking_helper.py").write_text(
        "def masked(q, k, m):\n    att = q @ k.transpose(-2, -1)\n    att = att.masked_fill(m, float('-inf'))\n"
        "    return att.softmax(-1)\n")
    (tmp_path / "model.py").write_text(
        "import torch\nfrom masking_helper import masked\n\n\nclass M(torch.nn.Module):\n"
        "    def forward(self, q, k, m):\n        return masked(q, k, m)\n\n\ndef make():\n"
        "    return M(), (torch.randn(2, 4, 4), torch.randn(2, 4, 4), torch.ones(4, 4).triu(1).bool())\n")
    before = (tmp_path / "masking_helper.py").read_bytes()
    code = main(["rewrite", "model.py:make", "--write", "--device", "cpu", "--no-history"])
    out = capsys.readouterr().out
    assert code == 0 and untouched(tmp_path / "masking_helper.py", before)
    assert "left alone: checked against the original: the rewrite is in" in out and "not the target's own file" in out


def test_every_fixture_is_listed_in_the_reliability_page():
    page = (Path(__file__).resolve().parents[3] / "docs" / "reliability.md").read_text()
    assert [n for n in FIXTURES if f"inplace/corpus/{n}.py" not in page] == []
