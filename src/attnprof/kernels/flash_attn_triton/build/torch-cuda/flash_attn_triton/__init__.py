"""flash_attn_triton: attnprof's FlashAttention forward in Triton, in the Hugging Face kernels layout.

Entry points:
  attention(q, k, v, causal=False, sm_scale=None, return_lse=False, causal_offset=0)
      [batch, heads, seq, head_dim] like torch's scaled_dot_product_attention (causal is top-left
      aligned, as SDPA's is_causal; causal_offset=Sk-Sq aligns it to the bottom right); k and v may
      have fewer heads (GQA) when their count divides q's.
  flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, return_attn_probs=False)
      flash-attn's call on [batch, seq, heads, head_dim] (causal bottom-right aligned), so that
      anything that loads a hub FlashAttention kernel can load this one; window_size=(left, right)
      runs the masked forward (masks.py).
  flash_attn_varlen_func, flash_attn_with_kvcache
      flash-attn's packed-batch call and its KV-cache call (split-KV decode, decode.py): flash_api.py.
  masked_attention(q, k, v, causal=False, window_size=(-1, -1), document_len=None, ...)
      sliding windows and document masks on [B, H, S, D], skipping the tiles the mask empties; with
      softcap (Gemma-2) and learnable_sink (gpt-oss), which flash_attn_func and flash_attn_varlen_func take too.
Every argument a launch would read out of bounds or compute wrong with is refused by a ValueError first
(_arguments.py); no key at all gives SDPA's zeros.
float16 or bfloat16, head_dim 64, 128 or 256 (or 192 for q and k with 128 for v: DeepSeek's MLA prefill; the output
has v's head dim; the Gluon kernels take 64 and 128, the plain Triton ones all), CUDA (sm_90 for the TMA and
warp-specialised paths) or, under TRITON_INTERPRET=1, CPU tensors through Triton's interpreter. Gradients flow
through attention() and flash_attn_func(): a Triton backward from the forward's saved LSE (_backward_kernels.py),
both registered as torch custom ops (_ops.py) so torch.compile traces them.
"""

from __future__ import annotations

import torch

from ._arguments import check_positive, check_window
from ._launch import check_causal_offset, check_inputs
from ._launch import softmax_scale as resolve_scale
from ._ops import attend
from .flash_api import documents, flash_attn_varlen_func, flash_attn_with_kvcache, masked_call, no_keys

__version__ = "0.1.0"
__all__ = ["attention", "flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache", "masked_attention",
           "transformers_attention"]


# flash-attn's other options, at the values that leave attention unchanged (deterministic is taken: it
# makes the backward bit-identical from run to run)
FLASH_ATTN_NO_OPS = {"alibi_slopes": (None,), "block_table": (None,)}
# what a caller used to SDPA or flash-attn may pass to attention(), and the name it has here
ATTENTION_SPELLINGS = {"is_causal": "causal", "scale": "sm_scale", "softmax_scale": "sm_scale"}


def _refuse_unknown(function: str, names, spellings: dict) -> None:
    if names:
        hints = "; ".join(f"{n} is spelled {spellings[n]} here" for n in sorted(names) if n in spellings)
        raise TypeError(f"flash_attn_triton.{function} does not take {', '.join(sorted(names))}"
                        + (f" ({hints})" if hints else ""))


def _is_no_op(name: str, value) -> bool:
    return any(value is allowed or (not isinstance(value, torch.Tensor) and value == allowed)
               for allowed in FLASH_ATTN_NO_OPS[name])


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              sm_scale: float | None = None, return_lse: bool = False, causal_offset: int = 0,
              deterministic: bool = False, **unknown):
    """softmax(q k^T * sm_scale) v over [B, H, S, D]; with return_lse also the natural-log LSE [B, H, S].
    With causal, key j is visible to query i when j <= i + causal_offset (an int). On sm_90 the backward of a
    large problem is a single pass whose float32 dQ sums may differ in their last bits from run to run (the
    Gluon kernel; FLASH_ATTN_TRITON_ATOMIC_DQ=1 picks the plain one elsewhere); deterministic=True (or
    torch.use_deterministic_algorithms(True)) makes the Gluon kernel add them in a fixed order, and keeps the
    two-pass backward elsewhere: bit-identical gradients from run to run."""
    if unknown:
        _refuse_unknown("attention", unknown, ATTENTION_SPELLINGS)
    if type(causal_offset) is not int:
        causal_offset = check_causal_offset(causal_offset)
    out, lse = _attention(q, k, v, causal, sm_scale, causal_offset, deterministic)
    return (out, lse) if return_lse else out


def _attention(q, k, v, causal: bool, sm_scale: float | None, causal_offset: int, deterministic: bool = False):
    if k.dim() == 4 and q.dim() == 4 and 0 in (q.shape[2], k.shape[2]):  # no key: SDPA's zeros, not 0/0
        check_inputs(q, k, v)
        resolve_scale(q.shape[-1], sm_scale)
        return no_keys(q, k, v, q.shape[:3])
    if torch.compiler.is_compiling():  # a refusal before torch.compile traces the op; eager calls check
        check_inputs(q, k, v)  # once per shape, when the launch is planned (_forward_plans)
    return attend(q, k, v, bool(causal), resolve_scale(q.shape[-1], sm_scale), causal_offset, bool(deterministic))


def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
                    softmax_scale: float | None = None, causal: bool = False, window_size=(-1, -1),
                    return_attn_probs: bool = False, deterministic: bool = False, softcap: float = 0.0,
                    learnable_sink: torch.Tensor | None = None, **options):
    """flash-attn's flash_attn_func on [B, S, H, D]; returns out, or (out, lse, None) with return_attn_probs.
    window_size=(left, right) other than (-1, -1), softcap > 0 (Gemma-2), learnable_sink ([H] logits,
    gpt-oss; FlashAttention-4's name) and causal with more queries than keys (the first rows see no key: 0,
    as flash-attn) run the masked forward (masks.py); flash-attn's other options are accepted at values that
    change nothing, refused at any other."""
    _refuse_unknown("flash_attn_func", options.keys() - FLASH_ATTN_NO_OPS.keys(), {})
    if dropout_p:
        raise NotImplementedError("flash_attn_triton has no dropout")
    changed = sorted(name for name, value in options.items() if not _is_no_op(name, value))
    if changed:
        raise NotImplementedError(f"flash_attn_triton does not support {', '.join(changed)} (only at "
                                  + "; ".join(f"{n}={FLASH_ATTN_NO_OPS[n][0]!r}" for n in changed) + ")")
    softmax_scale = resolve_scale(q.shape[-1], softmax_scale, "softmax_scale")  # its errors name the caller's word
    more_queries = causal and q.shape[1] > k.shape[1]  # rows above the diagonal see no key: the masked kernel's
    if check_window(window_size) != (-1, -1) or softcap != 0 or learnable_sink is not None or more_queries:
        out, lse = masked_call(q, k, v, causal, window_size, softmax_scale, softcap=softcap,
                               learnable_sink=learnable_sink, deterministic=bool(deterministic))
        return (out, lse, None) if return_attn_probs else out
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
    causal_off = k.shape[1] - q.shape[1] if causal else 0
    out, lse = _attention(qh, kh, vh, causal, softmax_scale, causal_off, deterministic)
    out = out.transpose(1, 2)
    return (out, lse, None) if return_attn_probs else out


def masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                     window_size: tuple[int, int] = (-1, -1), document_len: int | None = None,
                     sm_scale: float | None = None, return_lse: bool = False, bottom_right: bool = True,
                     softcap: float = 0.0, learnable_sink: torch.Tensor | None = None, deterministic: bool = False):
    """Attention over [B, H, S, D] that skips masked tiles: window_size=(left, right) as flash-attn's
    (-1: no limit; causal sets right to 0); document_len cuts each row into documents of that many
    tokens (q and k the same length) attended to only inside each; bottom_right=False aligns causal and
    the window to the top left (SDPA's is_causal); softcap > 0: Gemma-2's logit soft-capping; learnable_sink:
    gpt-oss's per-head sink logits [H]; deterministic=True: a backward bit-identical from run to run. Returns
    out, with return_lse also the LSE [B, H, S]."""
    if document_len is not None and q.shape[2] != k.shape[2]:
        raise ValueError("document masks need as many queries as keys")
    if document_len is not None:
        document_len = check_positive(document_len, "document_len")
    sm_scale = resolve_scale(q.shape[-1], sm_scale)  # its errors name the caller's word
    docs = None if document_len is None or k.shape[2] == 0 else documents(q.shape[2], document_len, q.device)
    out, lse = masked_call(q, k, v, causal, window_size, sm_scale, docs, bottom_right, layout="bhsd", softcap=softcap,
                           learnable_sink=learnable_sink, deterministic=bool(deterministic))
    return (out, lse) if return_lse else out


def transformers_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                           is_causal: bool | None = None, **kwargs):
    """transformers' attention interface, for attn_implementation="<org>/<name>:transformers_attention" (the
    hub-kernel path; LOCAL_KERNELS maps the id to this folder): [B, H, S, D] in, ([B, S, H, D], None) out.
    Causal as the module says, aligned bottom-right when a KV cache makes the keys longer than the queries."""
    if attention_mask is not None:
        raise NotImplementedError("flash_attn_triton takes no attention mask (padding); batch unpadded sequences")
    if dropout:
        raise NotImplementedError("flash_attn_triton has no dropout")
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    offset = key.shape[2] - query.shape[2] if causal else 0
    out = attention(query, key, value, causal=causal, sm_scale=scaling, causal_offset=offset)
    return out.transpose(1, 2).contiguous(), None
