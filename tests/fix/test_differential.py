"""fix.differential on its own: two modules of the same weights agree on the calls seen and their
variations (outputs and gradients), 16-bit ones held against an fp32 run of the original."""

from __future__ import annotations

import pytest
import torch

from attnprof.fix.differential import RewriteDiffers, cases, check_modules


class Eager(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(32, 32)

    def forward(self, q, k, v):
        s = (self.proj(q) @ k.transpose(-2, -1)) * q.size(-1) ** -0.5
        return torch.softmax(s, dim=-1) @ v


class Fused(Eager):
    scale: float | None = None

    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(self.proj(q), k, v, scale=self.scale)


def pair(dtype, scale=None):
    torch.manual_seed(0)
    before, after = Eager().to(dtype), Fused().to(dtype)
    after.load_state_dict(before.state_dict())
    after.scale = scale
    return before, after, tuple(torch.randn(2, 2, 16, 32, dtype=dtype) for _ in range(3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_same_math_agrees_at_every_length_with_grads(dtype):
    passed = check_modules(*pair(dtype))
    assert passed[0] == "the calls seen" and "a query of 4 against 16 keys" in passed and len(passed) >= 5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_dropped_scale_differs_in_both_dtypes(dtype):
    with pytest.raises(RewriteDiffers, match="differs from the original's on the calls seen"):
        check_modules(*pair(dtype, scale=1.0))


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
