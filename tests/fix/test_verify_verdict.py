"""One verdict on the outputs, judged the same way for a source rewrite and a library's switch: the
same within the dtype's tolerance, the same within 16-bit rounding when its error against a float64 run
is within flash-attention's bar (twice the original's), or different; worded so that one line cannot
contradict itself."""

from __future__ import annotations

from pathlib import Path

import torch

from attnprof.fix.target import Target
from attnprof.fix.verify import judge


class Eager(torch.nn.Module):
    def forward(self, q, k, v):
        s = (q @ k.transpose(-2, -1)) * q.size(-1) ** -0.5
        return torch.softmax(s, dim=-1) @ v


class Fused(torch.nn.Module):
    def __init__(self, scale: float | None = None):
        super().__init__()
        self.scale = scale

    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=self.scale)


def target(fn, dtype) -> Target:
    torch.manual_seed(0)
    inputs = tuple(torch.randn(2, 4, 64, 32).to(dtype) for _ in range(3))
    return Target("m.py:make", "m.make", Path("m.py"), fn, inputs)


def test_an_fp32_rewrite_is_the_same_in_plain_words():
    verdict = judge(target(Eager(), torch.float32), target(Fused(), torch.float32))
    assert verdict["match"] and verdict["detail"].startswith("the same (1 output tensor(s)")
    assert "not close" not in verdict["detail"]


def test_a_bf16_rewrite_is_judged_against_float64_and_says_so_without_contradiction():
    verdict = judge(target(Eager(), torch.bfloat16), target(Fused(), torch.bfloat16))
    assert verdict["match"], verdict
    assert verdict["detail"].startswith("the same") and "against a float64 run of the original" in verdict["detail"]
    assert "not close" not in verdict["detail"] and "Tensor-likes" not in verdict["detail"]


def test_a_rewrite_that_computes_something_else_is_different_in_both_dtypes():
    for dtype in (torch.float32, torch.bfloat16):
        verdict = judge(target(Eager(), dtype), target(Fused(scale=1.0), dtype))
        assert not verdict["match"] and verdict["detail"].startswith("different ("), verdict
