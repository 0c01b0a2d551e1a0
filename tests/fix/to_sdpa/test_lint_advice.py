"""lint's advice for hand-written attention is the rewrite `rewrite --to-sdpa` proposes for that module (its
own mask and scale), or why no SDPA call is equivalent: never is_causal=True for a mask not proved causal
(an encoder, a cross-attention with a key padding mask, T5's unscaled attention with a relative bias)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnprof import api

FORMS = Path(__file__).parent / "forms"
CASES = {  # form: (words the fix must hold, words it must not)
    "nanogpt_slow_path": ("F.scaled_dot_product_attention(q, k, v, dropout_p=", ""),
    "dinov2_attention": ("scaled_dot_product_attention(q, k, v, dropout_p=", "is_causal"),
    "cross_attention_key_padding": ("attn_mask=key_padding_mask[:, None, None, :]", "is_causal"),
    "hf_t5_eager": ("attn_mask=position_bias, dropout_p=self.dropout if self.training else 0.0, scale=1.0)",
                    "is_causal"),
    "gemma2_softcap": ("no single SDPA call is equivalent as written: ", "is_causal"),
}


@pytest.mark.parametrize("name", CASES)
def test_lint_advises_the_rewrite_it_would_write_or_why_none(name):
    must, never = CASES[name]
    report = api.lint(f"{FORMS / name}.py:make", device="cpu")
    [hand] = [f for f in report["findings"] if f["id"] == "hand-written-attention"]
    assert must in hand["fix"], hand["fix"]
    assert not never or never not in hand["fix"], hand["fix"]
