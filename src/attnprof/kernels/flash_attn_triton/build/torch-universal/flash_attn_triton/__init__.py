"""flash_attn_triton: attnprof's FlashAttention forward in Triton, in the Hugging Face kernels layout.

Two entry points:
  attention(q, k, v, causal=False, sm_scale=None, return_lse=False, causal_offset=0)
      [batch, heads, seq, head_dim] like torch's scaled_dot_product_attention (causal is top-left
      aligned, as SDPA's is_causal; causal_offset=Sk-Sq aligns it to the bottom right); k and v may
      have fewer heads (GQA) when their count divides q's.
  flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, return_attn_probs=False)
      flash-attn's call on [batch, seq, heads, head_dim] (causal bottom-right aligned), so that
      anything that loads a hub FlashAttention kernel can load this one.
float16 or bfloat16, head_dim 64 or 128, CUDA (sm_90 for the TMA and warp-specialised paths) or,
under TRITON_INTERPRET=1, CPU tensors through Triton's interpreter. Gradients flow through
attention() and flash_attn_func() (the backward recomputes the softmax from the saved LSE).
"""

from __future__ import annotations

import torch

from ._backward import AttentionFunction

__version__ = "0.1.0"
__all__ = ["attention", "flash_attn_func"]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              sm_scale: float | None = None, return_lse: bool = False, causal_offset: int = 0):
    """softmax(q k^T * sm_scale) v over [B, H, S, D]; with return_lse also the natural-log LSE [B, H, S].
    With causal, key j is visible to query i when j <= i + causal_offset."""
    out, lse = AttentionFunction.apply(q, k, v, causal, sm_scale, causal_offset)
    return (out, lse) if return_lse else out


def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
                    softmax_scale: float | None = None, causal: bool = False, return_attn_probs: bool = False,
                    **unsupported):
    """flash-attn's flash_attn_func on [B, S, H, D]; returns out, or (out, lse, None) with return_attn_probs."""
    if dropout_p:
        raise NotImplementedError("flash_attn_triton has no dropout")
    extras = {name: value for name, value in unsupported.items() if value not in (None, False, 0.0, (-1, -1))}
    if extras:
        raise NotImplementedError(f"flash_attn_triton does not support {', '.join(sorted(extras))}")
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
    causal_off = k.shape[1] - q.shape[1] if causal else 0
    out, lse = AttentionFunction.apply(qh, kh, vh, causal, softmax_scale, causal_off)
    out = out.transpose(1, 2)
    return (out, lse, None) if return_attn_probs else out
