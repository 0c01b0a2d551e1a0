"""Autograd: the Triton forward, and a backward in plain PyTorch that recomputes P from the saved LSE.

The backward is correct rather than fast: it works through QUERY_CHUNK query rows at a time in
float32 (so its memory is bounded by chunk x keys, not keys x keys) and uses cuBLAS for the products.
"""

from __future__ import annotations

import torch

from ._launch import forward

QUERY_CHUNK = 1024


def _visible(rows: torch.Tensor, sk: int, causal_off: int) -> torch.Tensor:
    """[rows, Sk] boolean: key j is visible to query i when j <= i + causal_off."""
    keys = torch.arange(sk, device=rows.device)
    return keys[None, :] <= rows[:, None] + causal_off


def _chunk_grads(q, k, v, out, lse, dout, rows, scale, causal, causal_off):
    """dQ for the query rows `rows`, and their contributions to dK and dV, in float32."""
    qc, oc, doc = (t[:, :, rows].float() for t in (q, out, dout))
    p = torch.exp(qc @ k.transpose(-1, -2) * scale - lse[:, :, rows, None])
    if causal:
        p = p.masked_fill(~_visible(rows, k.shape[2], causal_off), 0.0)
    dv = p.transpose(-1, -2) @ doc
    dp = doc @ v.transpose(-1, -2)
    ds = p * (dp - (doc * oc).sum(-1, keepdim=True))
    return ds @ k * scale, ds.transpose(-1, -2) @ qc * scale, dv


def backward(q, k, v, out, lse, dout, scale, causal, causal_off):
    group = q.shape[1] // k.shape[1]
    kf, vf = (t.float().repeat_interleave(group, dim=1) for t in (k, v))
    dq = torch.empty_like(q, dtype=torch.float32)
    dk = torch.zeros_like(kf)
    dv = torch.zeros_like(vf)
    for start in range(0, q.shape[2], QUERY_CHUNK):
        rows = torch.arange(start, min(start + QUERY_CHUNK, q.shape[2]), device=q.device)
        dq_c, dk_c, dv_c = _chunk_grads(q, kf, vf, out, lse, dout, rows, scale, causal, causal_off)
        dq[:, :, rows] = dq_c
        dk += dk_c
        dv += dv_c
    if group > 1:  # sum the query heads that shared each key/value head
        dk, dv = (t.unflatten(1, (k.shape[1], group)).sum(2) for t in (dk, dv))
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class AttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale, causal_off):
        out, lse = forward(q, k, v, causal=causal, sm_scale=sm_scale, causal_off=causal_off)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.scale = q.shape[-1] ** -0.5 if sm_scale is None else float(sm_scale)
        ctx.causal, ctx.causal_off = causal, causal_off
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = backward(q, k, v, out, lse, dout, ctx.scale, ctx.causal, ctx.causal_off)
        return dq, dk, dv, None, None, None
