"""Every fixture of user attention in corpus/ is refused with its reason or rewritten, and a rewrite
computes what the original does: checked here independently of attnprof's own check, on the calls
seen, at other lengths and with a query shorter than the keys, outputs and gradients.

Each fixture's docstring starts with what must happen: `refused: <words of the reason>`, or
`rewritten` (`rewritten: <text of the call>`; `no scale=`: the call carries none)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnprof.fix.target import load_target
from attnprof.fix.to_sdpa.checked import checked
from attnprof.fix.to_sdpa.plan import plan

CORPUS = Path(__file__).parent / "corpus"
FIXTURES = sorted(p.stem for p in CORPUS.glob("*.py"))


def expectation(name: str) -> tuple[str, str]:
    first = (CORPUS / f"{name}.py").read_text().split("\n", 1)[0].strip('"')
    verdict, _, words = first.partition(":")
    return verdict, words.strip()


def planned(name: str):
    spec = f"{CORPUS / name}.py:make"
    return spec, checked(spec, plan(load_target(spec)), "cpu")


@pytest.mark.parametrize("name", FIXTURES)
def test_each_fixture_is_refused_with_its_reason_or_rewritten_to_the_same_outputs(name):
    verdict, words = expectation(name)
    spec, (rewrites, sources, cases) = planned(name)
    assert rewrites, "no attention chain found"
    if verdict == "refused":
        assert not sources and not any(r.safe for r in rewrites), [r.call for r in rewrites]
        assert all(r.reason for r in rewrites) and words in rewrites[0].reason, rewrites[0].reason
        return
    assert [r.safe for r in rewrites] == [True], [r.reason for r in rewrites]
    call = rewrites[0].call
    assert ("scale=" not in call) if words == "no scale=" else words in call, call
    assert "the calls seen" in cases["inputs"] and cases["float64"]["max_relative_difference"] < 1e-10
    (old, new), = sources.values()
    before, after = load_target(spec, source=old), load_target(spec, source=new)
    after.fn.load_state_dict(before.fn.state_dict())
    before.fn.eval(), after.fn.eval()
    for i, inputs in enumerate(variations(before.inputs)):
        for grad in (False, True):
            try:
                want = run(before.fn, inputs, grad)
            except RuntimeError:  # a length the original itself rejects (a square mask, t != s)
                assert i > 0
                continue
            for a, b in zip(want, run(after.fn, inputs, grad), strict=True):
                torch.testing.assert_close(b, a)


def variations(inputs: tuple) -> list[tuple]:
    """The inputs as given, shorter, and (q, k, v first) with a query of 3 against all the keys."""
    out = [inputs, tuple(t[..., :5, :] if torch.is_tensor(t) and t.dim() >= 3 else t for t in inputs)]
    if len(inputs) >= 3 and all(torch.is_tensor(t) and t.dim() >= 3 for t in inputs[:3]):
        out.append((inputs[0][..., :3, :], *inputs[1:3], *(t[..., :3, :] if torch.is_tensor(t) and t.dim() == 2
                                                           else t for t in inputs[3:])))
    return out


def run(fn, inputs: tuple, grad: bool) -> list:
    leaves = tuple(t.detach().clone().requires_grad_(grad) if torch.is_tensor(t) and t.is_floating_point() else t
                   for t in inputs)
    with torch.set_grad_enabled(grad):
        out = fn(*leaves)
    if not grad:
        return [out]
    out.sum().backward()
    return [out.detach(), *(t.grad for t in leaves if torch.is_tensor(t) and t.requires_grad),
            *(p.grad for p in fn.parameters())]


def test_every_fixture_is_listed_in_the_reliability_page():
    page = (Path(__file__).resolve().parents[3] / "docs" / "reliability.md").read_text()
    assert [n for n in FIXTURES if f"corpus/{n}.py" not in page] == []
