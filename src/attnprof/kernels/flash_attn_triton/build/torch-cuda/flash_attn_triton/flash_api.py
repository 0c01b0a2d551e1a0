"""flash-attn's masked, packed and KV-cache calls, on the masked forward (masks.py) and the decode (decode.py).

Names, layouts and semantics are flash-attn 2's (flash_attn_interface.py): [batch, seq, heads, head_dim]
(packed: [total, heads, head_dim] with int32 cu_seqlens), causal and windows aligned to the bottom
right, window_size=(left, right) with -1 for no limit, the LSE in natural log. Arguments flash-attn has
and this kernel does not raise NotImplementedError naming them; values a launch would read out of bounds
with, or compute wrong with, raise ValueError before it (_arguments.py; validate=False skips the checks of
values on the device).
"""

from __future__ import annotations

import functools

import torch

from ._arguments import (
    as_int,
    check_block_table,
    check_cache_seqlens,
    check_cu_seqlens,
    check_positive,
    check_softcap,
    check_window,
    sink_logits,
)
from ._launch import check_inputs
from ._launch import softmax_scale as resolve_scale
from .backward.masked_backward import masked_attention_call, to_kernel_layout
from .decode import GPU_CONFIG as DECODE_CONFIG
from .decode import decode

DECODE_BLOCK_N = DECODE_CONFIG.block_n  # a paged cache's page holds whole key blocks of the decode
UNBOUNDED = 1 << 30  # a window bound past any sequence: "-1, no limit", kept small enough for int32 sums


# flash-attn's defaults for the arguments this kernel does not implement: any other value is refused
DEFAULTS = {"dropout_p": 0.0, "softcap": 0.0, "alibi_slopes": None, "block_table": None, "rotary_cos": None,
            "rotary_sin": None, "cache_batch_idx": None, "cache_leftpad": None}


def refuse(**given) -> None:
    """Raise NotImplementedError naming every argument given a value other than flash-attn's default."""
    named = sorted(name for name, value in given.items()
                   if ((value is not None) if DEFAULTS[name] is None else (value != DEFAULTS[name])))
    if named:
        raise NotImplementedError(f"flash_attn_triton does not support {', '.join(named)}")


@functools.cache  # made once per shape: a copy to the GPU per call would cost more host time than the kernel
def documents(length: int, document_len: int, device: torch.device) -> tuple[torch.Tensor, int]:
    """cu_seqlens of one row of `length` tokens cut into documents of document_len (the last may be
    shorter), and the longest document's length."""
    bounds = list(range(0, length, document_len)) + [length]
    return torch.tensor(bounds, dtype=torch.int32, device=device), min(document_len, length)


def window_bounds(causal: bool, window_size: tuple[int, int]) -> tuple[int, int]:
    """flash-attn's (left, right) as finite bounds: -1 is no limit, causal sets right to 0."""
    left, right = check_window(window_size)
    left = UNBOUNDED if left < 0 else left
    right = 0 if causal else UNBOUNDED if right < 0 else right
    return left, right


def softmax_scale_of(q: torch.Tensor, softmax_scale: float | None) -> float:
    return resolve_scale(q.shape[-1], softmax_scale, "softmax_scale")


def _whole(length: int, device: torch.device) -> torch.Tensor:
    return documents(length, length, device)[0]


_CHECKED: set = set()  # (shapes, dtypes, layout) that passed check_inputs: it reads nothing else


def check_once(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: str) -> None:
    """check_inputs on the kernels' [B, H, S, D] order, once per shape, dtype and layout (a few microseconds
    of host time per call otherwise)."""
    key = (q.shape, k.shape, v.shape, q.dtype, k.dtype, v.dtype, layout)
    if key not in _CHECKED:
        check_inputs(*(to_kernel_layout(t, layout).transpose(1, 2) for t in (q, k, v)))
        _CHECKED.add(key)


def no_keys(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lse_shape: tuple[int, ...],
            sink: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """SDPA's answer where there is no key at all: zeros (gradients of zero flow back to q, k and v, an
    empty sum's), and an LSE of +inf, flash-attn's for a row that sees no key (with a sink [H], the sink's
    logit: its softmax is the sink's alone, as the kernels give; lse_shape's heads are the second-last)."""
    zero = q.narrow(-1, 0, 0).sum(-1, keepdim=True) + k.sum() + v.sum()
    out_shape = (*q.shape[:-1], v.shape[-1])  # v's head dim (192/128: 128)
    if sink is None:
        return zero.expand(out_shape).clone(), torch.full(lse_shape, float("inf"), device=q.device)
    return zero.expand(out_shape).clone(), sink.detach()[:, None].expand(lse_shape).clone()


def masked_call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, window_size: tuple[int, int],
                softmax_scale: float | None, docs: tuple[torch.Tensor, int] | None = None, bottom_right: bool = True,
                layout: str = "bshd", softcap: float = 0.0, learnable_sink: torch.Tensor | None = None,
                deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The masked forward on [B, S, H, D] ("bshd") or [B, H, S, D] ("bhsd"), out in the same layout; docs:
    documents() of each row, the same for q and k; softcap (Gemma-2) and learnable_sink ([Hq], gpt-oss) as
    flash-attn's; deterministic: a backward bit-identical from run to run (masked_backward's)."""
    check_once(q, k, v, layout)
    scale, window = softmax_scale_of(q, softmax_scale), window_bounds(causal, window_size)
    softcap, sink = check_softcap(softcap), sink_logits(learnable_sink, q.shape[3 - (2 if layout == "bhsd" else 1)],
                                                         q.device)
    seq_dim = 2 if layout == "bhsd" else 1
    if k.shape[seq_dim] == 0:
        return no_keys(q, k, v, (q.shape[0], q.shape[3 - seq_dim], q.shape[seq_dim]), sink)
    if docs is None:
        sq, sk = q.shape[seq_dim], k.shape[seq_dim]
        cu_q, cu_k, max_q, max_k = _whole(sq, q.device), _whole(sk, q.device), sq, sk
    else:
        (cu_q, max_q), cu_k, max_k = docs, docs[0], docs[1]
    return masked_attention_call(q, k, v, cu_q, cu_k, max_q, max_k, scale, window, bottom_right, layout, softcap, sink,
                                 deterministic)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None, validate=True,
                           learnable_sink=None):
    """flash-attn's flash_attn_varlen_func: q [total_q, Hq, D], k and v [total_k, Hkv, D]; returns out
    [total_q, Hq, D], or (out, lse [Hq, total_q], None) with return_attn_probs. validate=False skips the
    check of cu_seqlens' values (one synchronisation per tensor version: _arguments.py); softcap (Gemma-2) and
    learnable_sink ([Hq] logits, gpt-oss) as flash-attn's."""
    refuse(dropout_p=dropout_p, alibi_slopes=alibi_slopes, block_table=block_table)
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        raise ValueError(f"q, k, v must be [total, heads, head_dim]; got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if cu.dtype != torch.int32 or cu.dim() != 1 or cu.device != q.device:
            raise ValueError(f"{name} must be a 1-D int32 tensor on q's device")
    if cu_seqlens_q.numel() != cu_seqlens_k.numel():
        raise ValueError("cu_seqlens_q and cu_seqlens_k must hold the same number of sequences")
    max_seqlen_q, max_seqlen_k = (check_positive(m, f"max_seqlen_{s}") for m, s in ((max_seqlen_q, "q"),
                                                                                   (max_seqlen_k, "k")))
    check_once(q, k, v, "thd")
    check_cu_seqlens(cu_seqlens_q, cu_seqlens_k, (q.shape[0], k.shape[0]), (max_seqlen_q, max_seqlen_k), validate)
    out, lse = masked_attention_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                     softmax_scale_of(q, softmax_scale), window_bounds(causal, window_size), True,
                                     "thd", check_softcap(softcap), sink_logits(learnable_sink, q.shape[1], q.device),
                                     bool(deterministic))
    return (out, lse, None) if return_attn_probs else out


def _append(cache: torch.Tensor, new: torch.Tensor, seqlens: torch.Tensor, block_table: torch.Tensor | None) -> None:
    """Write new [B, Snew, H, D] into cache at positions seqlens[b] .. seqlens[b] + Snew - 1, in place (a paged
    cache: position p of sequence b in page block_table[b, p // page_size], row p % page_size)."""
    batch = seqlens.shape[0]
    if new.shape[0] != batch or new.shape[2:] != cache.shape[2:]:
        raise ValueError(f"k and v must be [batch, seqlen_new, heads_k, head_dim] like the cache; got "
                         f"{tuple(new.shape)} for a cache {tuple(cache.shape)}")
    positions = seqlens.long()[:, None] + torch.arange(new.shape[1], device=cache.device)[None, :]
    if block_table is None:
        cache[torch.arange(batch, device=cache.device)[:, None], positions] = new
    else:
        page_size = cache.shape[1]
        cache[block_table.long().gather(1, positions // page_size), positions % page_size] = new


def _cache_lengths(cache_seqlens, k_cache: torch.Tensor, new: int, validate: bool, batch: int, slots: int
                   ) -> torch.Tensor:
    """cache_seqlens (None: the cache full after the append, an int, or an int32 [B] tensor) as a tensor, once
    it is known to leave room for the new keys: 0 <= cache_seqlens <= slots - new."""
    room = slots - new
    if room < 0:
        raise ValueError(f"{new} new keys do not fit a cache of {slots} slots")
    if not isinstance(cache_seqlens, torch.Tensor):
        length = room if cache_seqlens is None else as_int(cache_seqlens, "cache_seqlens")
        if not 0 <= length <= room:
            raise ValueError(f"cache_seqlens must lie in 0..{room} (the cache's slots less the new keys); "
                             f"got {length}")
        return torch.full((batch,), length, dtype=torch.int32, device=k_cache.device)
    if cache_seqlens.dtype != torch.int32 or cache_seqlens.shape != (batch,) or cache_seqlens.device != k_cache.device:
        raise ValueError(f"cache_seqlens must be an int or an int32 tensor of shape ({batch},) on the cache's device")
    check_cache_seqlens(cache_seqlens, room, validate)
    return cache_seqlens


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False,
                            validate=True, learnable_sink=None):
    """flash-attn's flash_attn_with_kvcache by split-KV decode: q [B, Sq, Hq, D] against the first
    cache_seqlens[b] keys of k_cache / v_cache [B, S, Hkv, D] (k, v: new keys appended in place first);
    returns out [B, Sq, Hq, D], and lse [B, Hq, Sq] with return_softmax_lse; with block_table [B, pages a
    sequence] (int32) the caches are pages [pages, page_size, Hkv, D], page_size a multiple of 64 (a paged KV
    cache, as vLLM's). validate=False skips the check of a cache_seqlens or block_table tensor's values (one
    synchronisation per tensor version: _arguments.py); softcap and learnable_sink ([Hq] logits) as
    flash_attn_varlen_func's (forward only: decode needs no gradient)."""
    refuse(rotary_cos=rotary_cos, rotary_sin=rotary_sin, cache_batch_idx=cache_batch_idx,
           cache_leftpad=cache_leftpad, alibi_slopes=alibi_slopes)
    softcap = check_softcap(softcap)
    sink = sink_logits(learnable_sink, q.shape[2] if q.dim() == 4 else 0, q.device)
    if (k is None) != (v is None):
        raise ValueError("pass both k and v to append to the cache, or neither")
    if q.dim() != 4 or k_cache.dim() != 4:
        raise ValueError(f"q and k_cache must be [batch, seq, heads, head_dim]; got {tuple(q.shape)}, "
                         f"{tuple(k_cache.shape)}")
    slots = k_cache.shape[1]
    if block_table is not None:  # pages [pages, page_size, heads, head_dim], block_table pages per sequence
        check_block_table(block_table, q.shape[0], k_cache, v_cache, DECODE_BLOCK_N, validate)
        slots = block_table.shape[1] * k_cache.shape[1]
    cache_seqlens = _cache_lengths(cache_seqlens, k_cache, 0 if k is None else k.shape[1], validate, q.shape[0],
                                   slots)
    if k is not None:
        _append(k_cache, k, cache_seqlens, block_table)
        _append(v_cache, v, cache_seqlens, block_table)
        cache_seqlens = cache_seqlens + k.shape[1]
    out, lse = decode(q, k_cache, v_cache, cache_seqlens, softmax_scale_of(q, softmax_scale),
                      window_bounds(causal, window_size), splits=num_splits or None, softcap=softcap, sink=sink,
                      block_table=block_table)
    return (out, lse) if return_softmax_lse else out
