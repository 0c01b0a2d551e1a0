"""fix.differential on its own: a candidate rewrite fed to the verifier directly (planning bypassed), so each
wrong one here is one the check itself must catch; and right ones in 16-bit must pass, decided in float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnprof.fix.cases import cases, flag_cases, masked_cases
from attnprof.fix.differential import RewriteDiffers, check_modules

SHAPE = (2, 2, 8, 4)


class Eager(torch.nn.Module):
    def __init__(self, p: float = 0.0):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.drop = torch.nn.Dropout(p)

    def forward(self, q, k, v):
        s = (self.proj(q) @ k.transpose(-2, -1)) * q.size(-1) ** -0.5
        return self.drop(torch.softmax(s, dim=-1)) @ v


class Fused(Eager):
    scale: float | None = None

    def forward(self, q, k, v):
        p = self.drop.p if self.drop.training else 0.0  # the dropout module's own flag
        return F.scaled_dot_product_attention(self.proj(q), k, v, scale=self.scale, dropout_p=p)


class OwnersFlag(Eager):
    def forward(self, q, k, v):  # reads the owner's flag: MC dropout stops dropping
        return F.scaled_dot_product_attention(self.proj(q), k, v, dropout_p=self.drop.p if self.training else 0.0)


def qkv(dtype=torch.float32, n: int = 3):
    torch.manual_seed(0)
    return tuple(torch.randn(*SHAPE, dtype=dtype) for _ in range(n))


def pair(before_cls, after_cls, dtype=torch.float32, p: float = 0.0):
    torch.manual_seed(0)
    before, after = before_cls(p).to(dtype), after_cls(p).to(dtype)
    after.load_state_dict(before.state_dict())
    return before.eval(), after.eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_same_math_is_equal_in_float64_at_every_length_with_grads(dtype):
    verdict = check_modules(*pair(Eager, Fused, dtype), qkv(dtype))
    f64 = verdict["float64"]
    assert verdict["inputs"][0] == "the calls seen" and "a query of 2 against 8 keys" in verdict["inputs"]
    assert f64["max_relative_difference"] < 1e-12 and f64["gradients"] > 0
    assert ("train mode with dropout p=0" in verdict["inputs"]) and verdict["autograd"]["lost"]
    if dtype == torch.bfloat16:  # both errors shown, the rewrite's inside the bar
        q = verdict["quality"]
        assert q["dtype"] == "bfloat16" and q["outputs"][1] <= 2 * q["outputs"][0] + 0.05
        assert q["gradients"][0] > 0 and q["gradients"][1] > 0
    else:
        assert verdict["quality"] == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_dropped_scale_differs_in_float64_in_both_dtypes(dtype):
    before, after = pair(Eager, Fused, dtype)
    after.scale = 1.0
    with pytest.raises(RewriteDiffers, match="differs from the original's on the calls seen in float64"):
        check_modules(before, after, qkv(dtype))


class FiniteFill(torch.nn.Module):
    def forward(self, q, k, v, pad):  # pad: [B, 1, 1, S], True where a key is padding
        s = (q @ k.transpose(-2, -1)) * 0.5
        return torch.softmax(s.masked_fill(pad, -1e9), dim=-1) @ v


class InfFill(torch.nn.Module):
    def forward(self, q, k, v, pad):
        s = (q @ k.transpose(-2, -1)) * 0.5
        return torch.softmax(s.masked_fill(pad, float("-inf")), dim=-1) @ v


class BoolMask(torch.nn.Module):
    def forward(self, q, k, v, pad):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=~pad, scale=0.5)


def padded():
    pad = torch.zeros(2, 1, 1, 8, dtype=torch.bool)
    pad[1, ..., 6:] = True
    return (*qkv(), pad)


def test_a_finite_fill_made_a_bool_mask_is_caught_on_an_empty_sample_the_factory_never_made():
    with pytest.raises(RewriteDiffers, match=r"on an empty sample \(input 3 all True\)"):
        check_modules(FiniteFill(), BoolMask(), padded())


def test_minus_inf_over_an_empty_sample_is_nan_before_and_0_after_and_stated():
    verdict = check_modules(InfFill(), BoolMask(), padded())
    assert "a fully masked row (every score -inf): NaN before, 0 after" in verdict["notes"]
    assert "a padded batch (input 3 all True)" in verdict["inputs"]


class AddedMask(torch.nn.Module):
    def forward(self, q, k, v, keep):
        s = (q @ k.transpose(-2, -1)) * 0.5 + (1.0 - keep.float()) * -1e9
        return torch.softmax(s, dim=-1) @ v


class AddedMaskFused(torch.nn.Module):
    def forward(self, q, k, v, keep):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=(1.0 - keep.float()) * -1e9, scale=0.5)


def test_an_additive_finite_mask_passed_through_is_the_same_on_the_rows_it_empties():
    """Over a row with nothing kept, s - 1e9 keeps ~1e-7 of s in float64: the bar there is the rounding at 1e9."""
    verdict = check_modules(AddedMask(), AddedMaskFused(), padded())
    absorbed = verdict["float64"]["absorbed"]
    assert "an empty sample (input 3 all False)" in verdict["inputs"]
    assert 1e-10 < absorbed["rtol"] < 1e-4 and 0 < absorbed["max_relative_difference"] < absorbed["rtol"]


def test_mask_variants_fill_a_row_a_sample_and_half_the_keys_in_both_polarities():
    mask = torch.ones(8, 8, dtype=torch.bool).tril()
    made = dict(masked_cases((torch.zeros(1, 8, 4), mask)))
    row = made["a fully masked row (input 1 all False)"][1]
    assert not row[0].any() and torch.equal(row[1:], mask[1:])
    assert made["an empty sample (input 1 all True)"][1].all()
    assert made["a padded batch (input 1 all False)"][1][0, 4:].sum() == 0
    assert not any(name.startswith("a fully") for name in dict(masked_cases((torch.zeros(1, 8, 4),))))


def test_mc_dropout_that_stops_dropping_is_caught():
    before, after = pair(Eager, OwnersFlag, p=0.5)
    with pytest.raises(RewriteDiffers, match="in MC dropout .* the original drops, the rewrite does not"):
        check_modules(before, after, qkv())


def test_the_dropout_modules_own_flag_keeps_mc_dropout_and_train_mode_by_seed():
    verdict = check_modules(*pair(Eager, Fused, p=0.5), qkv())
    assert {"train mode with its dropout (same seed)", "train mode with dropout p=0"} <= set(verdict["inputs"])
    assert any(name.startswith("MC dropout") for name in verdict["inputs"])


class MaybeDropout(torch.nn.Module):
    def __init__(self, p: float = 0.0):
        super().__init__()
        self.drop = torch.nn.Dropout(p) if p > 0 else torch.nn.Identity()

    def forward(self, q, k, v):
        return self.drop(torch.softmax(q @ k.transpose(-2, -1) * 0.5, dim=-1)) @ v


class ReadsP(MaybeDropout):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, scale=0.5, dropout_p=self.drop.p if self.training else 0.0)


def test_a_rewrite_that_raises_in_train_mode_only_is_caught():
    with pytest.raises(RewriteDiffers, match="raises in train mode with dropout p=0.*'Identity'"):
        check_modules(MaybeDropout().eval(), ReadsP().eval(), qkv())


def test_double_backward_and_jvp_lost_on_the_cpu_flash_kernel_are_listed_and_strict_refuses():
    verdict = check_modules(*pair(Eager, Fused), qkv())
    lost = " ".join(verdict["autograd"]["lost"])
    assert "double backward" in lost and "forward-mode AD" in lost and "_for_cpu" in lost
    with pytest.raises(RewriteDiffers, match="--strict: the rewrite loses double backward"):
        check_modules(*pair(Eager, Fused), qkv(), strict=True)


class MathPath(Eager):
    def forward(self, q, k, v):  # the same math by other ops: keeps both
        s = torch.einsum("bhqd,bhkd->bhqk", self.proj(q), k) / 2
        return torch.einsum("bhqk,bhkd->bhqd", s.softmax(-1), v)


def test_a_rewrite_that_keeps_double_backward_and_jvp_is_compared_on_them_and_passes_strict():
    verdict = check_modules(*pair(Eager, MathPath), qkv(), strict=True)
    assert verdict["autograd"]["lost"] == []
    assert {"double backward", "forward-mode AD (torch.func.jvp)"} <= set(verdict["autograd"]["preserved"])


class Switchable(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bidirectional = False
        self.register_buffer("causal", torch.ones(8, 8, dtype=torch.bool).tril())

    def forward(self, q, k, v):
        mask = self.causal.clone()
        if self.bidirectional:
            mask.fill_(True)  # the mask is causal only while the flag is off
        s = (q @ k.transpose(-2, -1) * 0.5).masked_fill(~mask, float("-inf"))
        return torch.softmax(s, dim=-1) @ v


class CausalAlways(Switchable):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.5)


def test_is_causal_from_a_mask_a_flag_fills_with_ones_is_caught_with_the_flag_flipped():
    with pytest.raises(RewriteDiffers, match="on `bidirectional` = True in float64"):
        check_modules(Switchable(), CausalAlways(), qkv())


class Nothing(torch.nn.Module):
    def forward(self, q, k, v):
        torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v


def test_a_forward_that_returns_nothing_is_refused_not_called_equal():
    with pytest.raises(RewriteDiffers, match="compared nothing proves nothing"):
        check_modules(Nothing(), Nothing(), qkv())


def test_the_check_enables_grad_for_itself_under_no_grad():
    with torch.no_grad():
        verdict = check_modules(*pair(Eager, Fused), qkv())
    assert verdict["float64"]["gradients"] > 0


class Float8Rounded(Fused):
    def forward(self, q, k, v):  # the same function in float64; in bf16 it rounds through float8
        out = super().forward(q, k, v)
        return out.to(torch.float8_e5m2).to(out.dtype)


def test_a_rewrite_that_rounds_worse_in_bf16_is_refused_with_both_errors():
    with pytest.raises(RewriteDiffers, match=r"in bfloat16 the rewrite's output 0 is .* the original's"):
        check_modules(*pair(Eager, Float8Rounded, torch.bfloat16), qkv(torch.bfloat16))


class ReturnsBf16(Fused):
    def forward(self, q, k, v):  # the same values in float64, another dtype in the model's own
        return super().forward(q, k, v).to(torch.bfloat16)


def test_a_rewrite_that_returns_another_dtype_is_caught_in_the_models_own_dtype():
    with pytest.raises(RewriteDiffers, match="in the model's own dtype the rewrite's output 0 is torch.bfloat16"):
        check_modules(*pair(Eager, ReturnsBf16), qkv())


class SoftmaxInFloat(Eager):
    def forward(self, q, k, v):  # HF's softmax(scores.float()).type_as(scores): fp32 on purpose
        s = (self.proj(q) @ k.transpose(-2, -1)) * q.size(-1) ** -0.5
        return self.drop(torch.softmax(s.float(), dim=-1).type_as(s)) @ v


def test_a_softmax_the_source_runs_in_fp32_is_held_at_float64_not_at_fp32():
    verdict = check_modules(*pair(SoftmaxInFloat, Fused), qkv())
    assert verdict["float64"]["max_relative_difference"] < 1e-12


def test_variations_cut_the_query_alone_where_the_inputs_share_a_length():
    q, k, v = (torch.zeros(1, 2, 8, 4) for _ in range(3))
    shapes = {name: [tuple(t.shape[-2:]) for t in inputs] for name, inputs in cases((q, k, v))}
    assert shapes["sequence length 1"] == [(1, 4)] * 3
    assert shapes["a query of 2 against 8 keys"] == [(2, 4), (8, 4), (8, 4)]


def test_the_other_values_case_keeps_the_shapes_and_each_rows_count_of_kept_keys():
    q = torch.randn(1, 8, 4)
    mask = torch.ones(8, 8, dtype=torch.bool).tril()
    (_, (q2, m2)), = [(n, c) for n, c in cases((q, mask)) if n.startswith("the same shapes with other values")]
    assert q2.shape == q.shape and not torch.equal(q2, q) and torch.equal(q2.flip(-2), q)
    assert sorted(m2.sum(-1).tolist()) == sorted(mask.sum(-1).tolist()) and not torch.equal(m2, mask)


def test_a_key_shaped_as_the_query_is_not_cut_as_a_mask_when_the_head_dim_equals_the_length():
    q, k, v = (torch.zeros(2, 4, 4) for _ in range(3))
    mask = torch.ones(4, 4, dtype=torch.bool)
    shapes = {name: [tuple(t.shape) for t in inputs] for name, inputs in cases((q, k, v, mask))}
    assert shapes["a query of 1 against 4 keys"] == [(2, 1, 4), (2, 4, 4), (2, 4, 4), (1, 4)]


def test_bool_arguments_are_flipped_one_at_a_time():
    made = dict(flag_cases({"x": torch.zeros(1), "causal": True, "cache": False}))
    assert made["`causal` = False"]["causal"] is False and made["`causal` = False"]["cache"] is False
    assert made["`cache` = True"]["cache"] is True and dict(flag_cases((torch.zeros(1), True)))["argument 1 = False"]
