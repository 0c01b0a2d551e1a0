"""float64 references for the masked and decode kernels: each mask built from its definition, key by key.
Shared by interpreted_masks_decode.py (CPU, the interpreter) and test_decode_and_masks.py (its GPU tests)."""

from __future__ import annotations

import math

import torch

NO_LIMIT = -1


def keep_mask(sq: int, sk: int, causal: bool, window: tuple[int, int], off: int) -> torch.Tensor:
    """[sq, sk]: query i (at position i + off) keeps key j, flash-attn's rule written out."""
    pos = torch.arange(sq)[:, None] + off
    keys = torch.arange(sk)[None, :]
    keep = torch.ones(sq, sk, dtype=torch.bool)
    right = 0 if causal else window[1]
    if right != NO_LIMIT:
        keep &= keys <= pos + right
    if window[0] != NO_LIMIT:
        keep &= keys >= pos - window[0]
    return keep


def reference(q, k, v, keep, softcap: float = 0.0, sink=None):
    """One sequence: q [Sq, Hq, D], k and v [Sk, Hkv, D] -> (out [Sq, Hq, D], lse [Hq, Sq]) in float64;
    a row that keeps no key gets 0 and +inf, flash-attn's convention. softcap > 0: Gemma-2's scores,
    softcap * tanh(scores / softcap); sink [Hq]: gpt-oss's eager sdpa (its model.py), the sink logits one more
    column of the softmax, dropped after it. Differentiable (float64 gradients)."""
    group = q.shape[1] // k.shape[1]
    k, v = (t.double().repeat_interleave(group, 1).transpose(0, 1) for t in (k, v))
    scores = q.double().transpose(0, 1) @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    scores = scores.masked_fill(~keep.to(scores.device), float("-inf"))  # keep_mask's is on the CPU
    if sink is not None:
        scores = torch.cat([scores, sink.double()[:, None, None].expand(-1, scores.shape[1], 1)], dim=-1)
    lse = scores.logsumexp(-1)
    weights = scores.softmax(-1).nan_to_num(0.0)
    out = ((weights[..., :-1] if sink is not None else weights) @ v).transpose(0, 1)
    return out, torch.where(lse == -float("inf"), float("inf"), lse)
