"""The verdict end to end: 16-bit blocks of the forms people write pass when the candidate is the same
function (decided in float64), `attnprof.patch(..., to_sdpa=True)` works under torch.no_grad(), `--strict`
refuses what loses double backward and leaves the file byte for byte, and a forward that returns nothing
is refused instead of called equal."""

from __future__ import annotations

import copy
import shutil
import textwrap
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

import attnprof
from attnprof.cli import main
from attnprof.errors import PatchError
from attnprof.fix.differential import RewriteDiffers, check_modules
from attnprof.fix.edits import patched_sources
from attnprof.fix.target import load_target
from attnprof.fix.to_sdpa.plan import plan
from support import FIXTURES

MODELS = FIXTURES / "user_models"


def fixture(name: str, dtype=torch.float32):
    target = load_target(f"{MODELS / name}.py:make")
    return target.fn.to(dtype), tuple(t.to(dtype) for t in target.inputs)


def candidate(module, forward_of_attention: str, method):
    """A copy of `module` whose `forward_of_attention` is `method`: a rewrite fed to the verifier as if
    planning had accepted it."""
    rewritten = copy.deepcopy(module)
    setattr(rewritten, forward_of_attention, method.__get__(rewritten))
    return rewritten


def nanogpt_sdpa(self, x):
    B, T, C = x.size()
    q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
    q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                       dropout_p=self.attn_dropout.p if self.attn_dropout.training else 0.0)
    return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))


def gpt2_sdpa(self, q, k, v):
    p = self.attn_dropout.p if self.attn_dropout.training else 0.0
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)


@pytest.mark.parametrize("name,method,attribute", [("nanogpt_block", nanogpt_sdpa, "forward"),
                                                   ("gpt2_where_block", gpt2_sdpa, "_attn")])
def test_bf16_blocks_refused_by_their_rounding_before_now_pass_in_float64(name, method, attribute):
    module, inputs = fixture(name, torch.bfloat16)
    verdict = check_modules(module, candidate(module, attribute, method), inputs)
    assert verdict["float64"]["max_relative_difference"] < 1e-12 and verdict["float64"]["gradients"] > 0
    sixteen = verdict["quality"]
    assert sixteen["dtype"] == "bfloat16" and sixteen["gradients"][1] > 0 and sixteen["outputs"][1] > 0
    assert any(mode.startswith("MC dropout") for mode in verdict["inputs"])


def test_the_planned_rewrite_of_the_bf16_gpt2_where_block_passes_the_float64_verifier():
    """What `rewrite --to-sdpa` writes for GPT-2's `_attn` built in bf16 (its bottom-right mask as
    attn_mask=, the sizes its mask slice reads taken from q and k), checked against the original."""
    module, inputs = fixture("gpt2_where_block", torch.bfloat16)
    target = load_target(f"{MODELS / 'gpt2_where_block.py'}:make")
    (rewrite,) = plan(replace(target, fn=module, inputs=inputs))
    assert rewrite.safe, rewrite.reason
    assert "attn_mask=mask.bool()" in rewrite.call and "is_causal" not in rewrite.call
    ((_, new),) = patched_sources(rewrite.edits).values()
    assert "nd, ns = q.size(-2), k.size(-2)" in new
    rewritten = load_target(f"{MODELS / 'gpt2_where_block.py'}:make", source=new).fn.to(torch.bfloat16)
    rewritten.load_state_dict(module.state_dict())
    verdict = check_modules(module, rewritten, inputs)
    assert verdict["float64"]["max_relative_difference"] < 1e-12 and verdict["float64"]["gradients"] > 0
    assert verdict["quality"]["dtype"] == "bfloat16"


def test_the_same_bf16_block_with_the_owners_training_flag_is_caught_under_mc_dropout():
    def owners_flag(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                              dropout_p=self.attn_dropout.p if self.training else 0.0)

    module, inputs = fixture("gpt2_where_block", torch.bfloat16)
    with pytest.raises(RewriteDiffers, match="`attn_dropout` in train.* the original drops, the rewrite does not"):
        check_modules(module, candidate(module, "_attn", owners_flag), inputs)


def test_patch_to_sdpa_works_under_no_grad_and_says_what_it_checked():
    module, inputs = fixture("mask_in_forward")
    with torch.no_grad():
        patched = attnprof.patch(module, to_sdpa=True, inputs=inputs)
    assert "scaled_dot_product_attention(" in patched.attnprof_rewrites[0]
    verdict = patched.attnprof_verdict
    assert verdict["float64"]["gradients"] > 0 and "double backward" in " ".join(verdict["autograd"]["lost"])


def test_patch_strict_refuses_the_rewrite_that_loses_double_backward_and_takes_it_back():
    module, inputs = fixture("mask_in_forward")
    with pytest.raises(PatchError, match="--strict: the rewrite loses double backward"):
        attnprof.patch(module, to_sdpa=True, inputs=inputs, strict=True)
    assert "forward" not in vars(module)


@pytest.fixture
def copied(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def copy_of(name: str):
        shutil.copy(MODELS / f"{name}.py", tmp_path)
        return tmp_path / f"{name}.py"

    return copy_of


def rewrite_cli(capsys, spec: str, *flags: str) -> str:
    code = main(["rewrite", spec, "--to-sdpa", "--device", "cpu", "--no-history", *flags])
    assert code == 0
    return capsys.readouterr().out


def test_strict_on_the_cli_refuses_and_leaves_the_file_byte_for_byte(copied, capsys):
    path = copied("mask_in_forward")
    before = path.read_bytes()
    out = rewrite_cli(capsys, f"{path.name}:make", "--write", "--strict")
    assert "left alone: checked against the original: --strict: the rewrite loses double backward" in out
    assert path.read_bytes() == before and not path.with_suffix(".py.orig").exists()


def test_without_strict_the_verdict_block_lists_inputs_and_the_autograd_lost(copied, capsys):
    path = copied("mask_in_forward")
    out = rewrite_cli(capsys, f"{path.name}:make", "--write")
    assert "checked against the original (same weights, in float64): outputs and gradients equal on" in out
    assert "inputs tried: the calls seen;" in out and "train mode with dropout p=0" in out
    assert "autograd lost: double backward (derivative for aten::_scaled_dot_product_flash_attention_for_cpu" in out
    assert "scaled_dot_product_attention(" in path.read_text()


def test_a_forward_that_returns_nothing_is_refused_and_not_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "keeps.py"
    path.write_text(textwrap.dedent('''
        import torch
        import torch.nn as nn


        class Keeps(nn.Module):
            def forward(self, q, k, v):
                s = q @ k.transpose(-2, -1) * 0.5
                y = torch.softmax(s, dim=-1) @ v
                self.last = y


        def make():
            torch.manual_seed(0)
            return Keeps(), tuple(torch.randn(1, 2, 8, 4) for _ in range(3))
    '''))
    before = path.read_bytes()
    out = rewrite_cli(capsys, "keeps.py:make", "--write")
    assert "outputs and gradients equal" not in out
    assert "compared nothing proves nothing" in out or "left alone" in out
    assert path.read_bytes() == before and not (tmp_path / "keeps.py.orig").exists()


def test_the_verdict_block_states_nan_before_and_0_after_and_the_bar_where_a_fill_absorbs_scores():
    from attnprof.report.fix_views import render_checked

    class Filled(torch.nn.Module):
        def forward(self, q, k, v, pad):
            s = (q @ k.transpose(-2, -1) * 0.5).masked_fill(pad, float("-inf")) + pad.float() * -1e9
            return torch.softmax(s, dim=-1) @ v

    class Fused(torch.nn.Module):
        def forward(self, q, k, v, pad):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=~pad, scale=0.5)

    torch.manual_seed(0)
    pad = torch.zeros(2, 1, 1, 8, dtype=torch.bool)
    lines: list[str] = []
    render_checked(check_modules(Filled(), Fused(), (*(torch.randn(2, 2, 8, 4) for _ in range(3)), pad)), lines.append)
    assert lines[0].startswith("checked against the original (same weights, in float64): outputs and gradients")
    assert "where a finite fill absorbs the scores" in lines[0]
    assert "  note: a fully masked row (every score -inf): NaN before, 0 after" in lines
    assert any(line.startswith("  inputs tried: the calls seen;") and "an empty sample" in line for line in lines)
