"""The online-softmax step the decode and masked kernels share (FlashAttention-2's, in base 2).

A row whose keys are all masked so far keeps m = -inf: the step then subtracts 0 instead of m, so that
exp2(-inf - (-inf)) never makes a NaN, and such a row ends with l = 0 (finish() writes 0 for it and an
LSE of +inf, flash-attn's convention for a row that sees no key). _forward._key_block is the same
step for the dense kernel, where every row keeps key 0 and the guard is not needed.
"""

from __future__ import annotations

import triton
import triton.language as tl

LN_2 = tl.constexpr(0.6931471805599453)
LOG2_E = tl.constexpr(1.4426950408889634)


@triton.jit
def online_softmax_step(acc, l_i, m_i, qk, v):
    """Fold one block into the running (acc, l, m): qk is the block's scores already scaled by
    scale * log2(e) and -inf where masked; v is the block's values."""
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    m_use = tl.where(m_new == -float("inf"), 0.0, m_new)
    p = tl.math.exp2(qk - m_use[:, None])
    alpha = tl.math.exp2(m_i - m_use)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, l_i, m_new


@triton.jit
def finish(acc, l_i, m_i):
    """(normalised output in float32, natural-log LSE): rows that saw no key get 0 and +inf."""
    seen = l_i > 0
    out = acc / tl.where(seen, l_i, 1.0)[:, None]
    lse = tl.where(seen, (m_i + tl.math.log2(tl.where(seen, l_i, 1.0))) * LN_2, float("inf"))
    return out, lse


@triton.jit
def tanh(x):
    """tanh from exp2 (the interpreter and every GPU have it): 1 - 2 / (exp(2x) + 1), exactly +-1 at +-inf."""
    return 1.0 - 2.0 / (tl.math.exp2(x * 2.8853900817779268) + 1.0)


@triton.jit
def scores(qk, qk_scale, cap_scale, SOFTCAP: tl.constexpr):
    """Raw q.k scores as the exponent's base-2 logits: qk * scale * log2(e), or with SOFTCAP (Gemma-2's logit
    soft-capping, cap * tanh(qk * scale / cap)) tanh(qk * cap_scale) * qk_scale, where the host passes
    cap_scale = scale / cap and qk_scale = cap * log2(e)."""
    if SOFTCAP:
        return tanh(qk * cap_scale) * qk_scale
    return qk * qk_scale


@triton.jit
def with_sink(acc, l_i, m_i, sink):
    """Fold a learnable sink (gpt-oss: a logit that joins every row's softmax denominator and carries no
    value) into the running (acc, l, m); a row that saw no key ends with out 0 and LSE = sink."""
    sink2 = sink * LOG2_E
    m_new = tl.maximum(m_i, sink2)
    m_use = tl.where(m_new == -float("inf"), 0.0, m_new)
    alpha = tl.math.exp2(m_i - m_use)
    return acc * alpha[:, None], l_i * alpha + tl.math.exp2(sink2 - m_use), m_new
