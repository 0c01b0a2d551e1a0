"""Autograd for the masked forward: the Triton forward, and a backward in PyTorch.

The backward recomputes P from the saved LSE, sequence by sequence and QUERY_CHUNK rows at a time in
float32, with the same visibility rule as the kernel (masks.py): correct, bounded in memory by chunk
x keys, and slow. It is the stand-in until the Triton backward (issue 24) takes the window and the
sequence bounds.
"""

from __future__ import annotations

import torch

from .masks import masked_forward

QUERY_CHUNK = 1024


def visible(rows: torch.Tensor, sk: int, off: int, window: tuple[int, int]) -> torch.Tensor:
    """[rows, sk] boolean: key j is visible to row i when i + off - left <= j <= i + off + right."""
    keys = torch.arange(sk, device=rows.device)[None, :]
    pos = rows[:, None] + off
    return (keys >= pos - window[0]) & (keys <= pos + window[1])


def _sequence_grads(q, k, v, out, lse, dout, off, scale, window):
    """Gradients of one sequence: q, out, dout [B, Hq, Sq, D]; k, v [B, Hq, Sk, D]; lse [B, Hq, Sq]."""
    dq = torch.empty_like(q)
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    for start in range(0, q.shape[2], QUERY_CHUNK):
        rows = torch.arange(start, min(start + QUERY_CHUNK, q.shape[2]), device=q.device)
        qc, oc, doc = (t[:, :, rows] for t in (q, out, dout))
        p = torch.exp(qc @ k.transpose(-1, -2) * scale - lse[:, :, rows, None])
        p = p.masked_fill(~visible(rows, k.shape[2], off, window), 0.0)
        dv += p.transpose(-1, -2) @ doc
        ds = p * (doc @ v.transpose(-1, -2) - (doc * oc).sum(-1, keepdim=True))
        dq[:, :, rows] = ds @ k * scale
        dk += ds.transpose(-1, -2) @ qc * scale
    return dq, dk, dv


def masked_backward(q, k, v, out, lse, dout, cu_q: list[int], cu_k: list[int], scale: float,
                    window: tuple[int, int], bottom_right: bool):
    """dq, dk, dv for masked_forward's layout ([B, T, H, D]; lse [B, Hq, Tq])."""
    group = q.shape[2] // k.shape[2]
    dq = torch.zeros_like(q, dtype=torch.float32)
    dk = torch.zeros_like(k, dtype=torch.float32)
    dv = torch.zeros_like(v, dtype=torch.float32)
    for qs, qe, ks, ke in zip(cu_q[:-1], cu_q[1:], cu_k[:-1], cu_k[1:], strict=True):
        if qe == qs or ke == ks:
            continue
        heads_first = [t.float().transpose(1, 2) for t in (q[:, qs:qe], out[:, qs:qe], dout[:, qs:qe])]
        kz, vz = (t[:, ks:ke].float().transpose(1, 2).repeat_interleave(group, dim=1) for t in (k, v))
        off = (ke - ks) - (qe - qs) if bottom_right else 0
        dq_z, dk_z, dv_z = _sequence_grads(heads_first[0], kz, vz, heads_first[1], lse[:, :, qs:qe],
                                           heads_first[2], off, scale, window)
        dq[:, qs:qe] = dq_z.transpose(1, 2)
        dk[:, ks:ke] = dk_z.unflatten(1, (k.shape[2], group)).sum(2).transpose(1, 2)
        dv[:, ks:ke] = dv_z.unflatten(1, (k.shape[2], group)).sum(2).transpose(1, 2)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class MaskedAttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, scale, window, bottom_right):
        out, lse = masked_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, scale, window, bottom_right)
        ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k)
        ctx.scale, ctx.window, ctx.bottom_right = scale, window, bottom_right
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
        dq, dk, dv = masked_backward(q, k, v, out, lse, dout, cu_q.tolist(), cu_k.tolist(), ctx.scale, ctx.window,
                                     ctx.bottom_right)
        return dq, dk, dv, None, None, None, None, None, None
