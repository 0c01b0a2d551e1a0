"""A stand-in for FlashAttention 3's `flash_attn_interface` (Dao-AILab/flash-attention, hopper/) over
attnprof's Triton kernel `flash_attn_triton`, so that flash-attention's own hopper/test_flash_attn.py runs
against our kernel unmodified.

Signatures are FA3's. What the kernel has is called directly: flash_attn_func (dense and windowed, with
autograd), flash_attn_varlen_func (packed batches, with autograd), flash_attn_with_kvcache (split-KV decode).
softcap goes to the kernel (its masked forward and backward, its decode); page_table to its paged decode
(vLLM's layout, FA3's) where the page size is a multiple of the decode's 64-key block.
What FA3 has and the kernel lacks ends the test with pytest.skip (SKIPPED, not FAILED): qv,
q/k/v_descale (FP8), pages of fewer than 64 rows, page_table with cache_batch_idx / cache_leftpad /
cu_seqlens_q / attention_chunk, rotary, head dims other than 64/128/256 and 192 with v 128, dtypes other than
fp16/bf16, head_dim_v smaller than or not a multiple of head_dim (192/128 aside), flash_attn_combine. FA3's
tests loop over v's head dims inside one test (d 192: v 128, then 192), so a d-192 test runs 192/128 and then
ends SKIPPED at 192/192: a wrong 192/128 result still fails it.

Arguments that only choose how FA3 schedules work (num_splits, pack_gqa, sm_margin, scheduler_metadata) are
ignored, except num_splits for the KV-cache call, which our decode takes (0: its own heuristic).

A few FA3 features are composed from exact calls of the kernel, in plain torch indexing (no arithmetic on
the outputs, so an error is the kernel's):
- head_dim_v = m * head_dim (the tests' d=64, dv=256/512): m calls on V's slices of head_dim, outputs
  concatenated (softmax(QK^T) is the same for every slice; gradients add up through autograd);
- seqused_q / seqused_k (varlen): the used tokens gathered into a packed batch, one varlen call, scattered
  back (unused rows 0);
- attention_chunk (forward only; FA3 has no backward for it): each sequence cut into the chunks' sub-problems
  (queries of chunk c against its keys), packed into one varlen call (KV cache: one decode call per piece);
  the window and the causal mask keep their bottom-right alignment inside each piece;
- KV cache: cache_batch_idx (gather the rows, write them back), cache_leftpad (each row's cache shifted to
  start at its left pad, then shifted back), cu_seqlens_q / cu_seqlens_k_new (one decode call per sequence).
FA_SHIM_STRICT=1 skips these instead of composing them.
"""

import os

import pytest
import torch

HEAD_DIMS = (64, 128, 256)  # q/k head dims the kernel takes with v's alike
PAIRS = {(192, 128)}  # (q/k, v) head dims it takes unlike (DeepSeek's MLA prefill)
DTYPES = (torch.float16, torch.bfloat16)
PAGE_BLOCK = 64  # the decode's key block: a page holds whole blocks
STRICT = os.environ.get("FA_SHIM_STRICT", "0") == "1"

_fat = None


def _kernel():
    """flash_attn_triton, imported on first use (so that collection needs no Triton)."""
    global _fat
    if _fat is None:
        import flash_attn_triton
        _fat = flash_attn_triton
    return _fat


def _skip(what):
    pytest.skip(f"flash_attn_triton shim: {what} not supported")


def _check(q, k, v, qv=None, q_descale=None, k_descale=None, v_descale=None, softcap=0.0, page_table=None,
           rotary_cos=None, rotary_sin=None, same_dv=False):
    if qv is not None:
        _skip("qv")
    if q_descale is not None or k_descale is not None or v_descale is not None:
        _skip("q/k/v_descale (FP8)")
    if page_table is not None and k.shape[1] % PAGE_BLOCK:
        _skip(f"page_size {k.shape[1]} (the paged decode takes multiples of {PAGE_BLOCK})")
    if rotary_cos is not None or rotary_sin is not None:
        _skip("rotary")
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        _skip(f"dtype {q.dtype}")
    d, dv = q.shape[-1], v.shape[-1]
    if (d, dv) in PAIRS:
        return
    if d not in HEAD_DIMS:
        _skip(f"head_dim {d} with head_dim_v {dv}")
    if dv != d and (same_dv or STRICT or dv % d != 0):
        _skip(f"head_dim_v {dv} with head_dim {d}")


def _window(window_size):
    return (int(window_size[0]), int(window_size[1]))


def _compose(what):
    if STRICT:
        _skip(f"{what} (composed; FA_SHIM_STRICT=1)")


def _by_dv_slices(call, q, k, v, *args):
    """call(q, k, v, *args) -> (out, lse); with head_dim_v = m * head_dim, m calls on V's slices."""
    d, dv = q.shape[-1], v.shape[-1]
    if dv == d or (d, dv) in PAIRS:
        return call(q, k, v, *args)
    outs, lse = [], None
    for i in range(dv // d):
        out, lse_i = call(q, k, v[..., i * d:(i + 1) * d].contiguous(), *args)
        outs.append(out)
        lse = lse_i if lse is None else lse
    return torch.cat(outs, dim=-1), lse


def _dense(q, k, v, scale, causal, window, deterministic, softcap):
    out, lse, _ = _kernel().flash_attn_func(q, k, v, softmax_scale=scale, causal=causal, window_size=window,
                                            softcap=softcap, return_attn_probs=True, deterministic=deterministic)
    return out, lse  # [B, Sq, H, dv], [B, H, Sq]


def _varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, window, deterministic, softcap):
    out, lse, _ = _kernel().flash_attn_varlen_func(q, k, v, cu_q, cu_k, int(max_q), int(max_k),
                                                   softmax_scale=scale, causal=causal, window_size=window,
                                                   softcap=softcap, deterministic=deterministic,
                                                   return_attn_probs=True)
    return out, lse  # [Tq, H, dv], [H, Tq]


def _pieces(sq, sk, chunk):
    """(r0, r1, k0, k1): query rows [r0, r1) against keys [k0, k1) of one sequence; with chunk > 0 the
    chunks' sub-problems (row r sits at position r + sk - sq, its chunk the one holding that position; rows
    at negative positions see no key and stay 0). r1 - k1 = sq - sk in every piece, so the bottom-right
    alignment of causal and the window is the sequence's own."""
    if chunk <= 0:
        return [(0, sq, 0, sk)]
    out = []
    for c in range((sk + chunk - 1) // chunk):
        k0, k1 = c * chunk, min(sk, (c + 1) * chunk)
        r0, r1 = max(0, k0 + sq - sk), min(sq, k1 + sq - sk)
        if r1 > r0:
            out.append((r0, r1, k0, k1))
    return out


def _packed(q, k, v, starts_q, lens_q, starts_k, lens_k, chunk, scale, causal, window, deterministic, softcap):
    """Attention of packed q [Tq, H, D] / k, v [Tk, Hk, *] over sequences b (rows starts_q[b] + [0, lens_q[b]),
    keys likewise), cut by chunk: the pieces gathered into one packed batch, one varlen call, scattered back.
    Rows in no piece are 0 (LSE -inf)."""
    q_idx, k_idx, cu_q, cu_k = [], [], [0], [0]
    for b in range(len(lens_q)):
        for r0, r1, k0, k1 in _pieces(int(lens_q[b]), int(lens_k[b]), chunk):
            q_idx.extend(range(starts_q[b] + r0, starts_q[b] + r1))
            k_idx.extend(range(starts_k[b] + k0, starts_k[b] + k1))
            cu_q.append(cu_q[-1] + r1 - r0)
            cu_k.append(cu_k[-1] + k1 - k0)
    dev = q.device
    out = q.new_zeros(q.shape[0], q.shape[1], v.shape[-1])
    lse = torch.full((q.shape[1], q.shape[0]), float("-inf"), device=dev, dtype=torch.float32)
    if len(cu_q) == 1 or cu_q[-1] == 0:
        return out + 0 * (q.sum() + k.sum() + v.sum()), lse  # keep the graph connected
    qi = torch.tensor(q_idx, device=dev, dtype=torch.long)
    ki = torch.tensor(k_idx, device=dev, dtype=torch.long)
    cuq = torch.tensor(cu_q, device=dev, dtype=torch.int32)
    cuk = torch.tensor(cu_k, device=dev, dtype=torch.int32)
    max_q = max(b - a for a, b in zip(cu_q, cu_q[1:], strict=False))
    max_k = max(b - a for a, b in zip(cu_k, cu_k[1:], strict=False))
    o, o_lse = _by_dv_slices(_varlen, q.index_select(0, qi), k.index_select(0, ki), v.index_select(0, ki),
                         cuq, cuk, max_q, max_k, scale, causal, window, deterministic, softcap)
    return out.index_copy(0, qi, o), lse.index_copy(1, qi, o_lse.float())


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                    v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                    pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False):
    """FA3's flash_attn_func: out [B, Sq, H, dv], or (out, lse [B, H, Sq]) with return_attn_probs."""
    _check(q, k, v, qv, q_descale, k_descale, v_descale, softcap)
    window, chunk, softcap = _window(window_size), int(attention_chunk), float(softcap or 0.0)
    if chunk == 0:
        out, lse = _by_dv_slices(_dense, q, k, v, softmax_scale, causal, window, deterministic, softcap)
    else:
        _compose("attention_chunk")
        (b, sq), sk = q.shape[:2], k.shape[1]
        out, lse = _packed(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), [i * sq for i in range(b)],
                           [sq] * b, [i * sk for i in range(b)], [sk] * b, chunk, softmax_scale, causal, window,
                           deterministic, softcap)
        out, lse = out.unflatten(0, (b, sq)), lse.unflatten(1, (b, sq)).transpose(0, 1)
    return (out, lse) if return_attn_probs else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=None,
                           seqused_k=None, softmax_scale=None, causal=False, qv=None, q_descale=None,
                           k_descale=None, v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                           num_splits=1, pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False):
    """FA3's flash_attn_varlen_func: out [Tq, H, dv], or (out, lse [H, Tq]) with return_attn_probs."""
    _check(q, k, v, qv, q_descale, k_descale, v_descale, softcap)
    window, chunk, softcap = _window(window_size), int(attention_chunk), float(softcap or 0.0)
    if chunk == 0 and seqused_q is None and seqused_k is None:
        out, lse = _by_dv_slices(_varlen, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                 softmax_scale, causal, window, deterministic, softcap)
    else:
        _compose("seqused_q/seqused_k" if chunk == 0 else "attention_chunk")
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        lq = seqused_q.tolist() if seqused_q is not None else [b - a for a, b in zip(cq, cq[1:], strict=False)]
        lk = seqused_k.tolist() if seqused_k is not None else [b - a for a, b in zip(ck, ck[1:], strict=False)]
        out, lse = _packed(q, k, v, cq[:-1], lq, ck[:-1], lk, chunk, softmax_scale, causal, window, deterministic,
                           softcap)
    return (out, lse) if return_attn_probs else out


def flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None):
    _skip("flash_attn_combine (no separate combine kernel)")


def get_scheduler_metadata(*args, **kwargs):
    """FA3's scheduler metadata: our kernels plan on their own; None is passed back and ignored."""
    return None


def _shifted(cache, leftpad):
    """cache [B, S, ...] with row b's entries from leftpad[b] moved to 0 (zeros past the end): a copy."""
    out = torch.zeros_like(cache)
    for b, p in enumerate(leftpad.tolist()):
        out[b, :cache.shape[1] - p] = cache[b, p:]
    return out


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, page_table=None,
                            cu_seqlens_q=None, cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None,
                            q_descale=None, k_descale=None, v_descale=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), attention_chunk=0, softcap=0.0, rotary_interleaved=True,
                            scheduler_metadata=None, num_splits=0, pack_gqa=None, sm_margin=0,
                            return_softmax_lse=False):
    """FA3's flash_attn_with_kvcache: out [B, Sq, H, dv] (packed [Tq, H, dv] with cu_seqlens_q), with
    return_softmax_lse also lse [B, H, Sq] ([H, Tq])."""
    _check(q, k_cache, v_cache, qv, q_descale, k_descale, v_descale, softcap, page_table, rotary_cos, rotary_sin,
           same_dv=True)
    fat = _kernel()
    window, chunk, softcap = _window(window_size), int(attention_chunk), float(softcap or 0.0)
    varlen = cu_seqlens_q is not None
    batch = cu_seqlens_q.numel() - 1 if varlen else q.shape[0]
    if cache_seqlens is None and page_table is not None:
        cache_seqlens = page_table.shape[1] * k_cache.shape[1] - (0 if k is None else k.shape[1])
    if cache_seqlens is None:
        cache_seqlens = k_cache.shape[1] - (0 if k is None or cu_seqlens_k_new is not None else k.shape[1])
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((batch,), cache_seqlens, dtype=torch.int32, device=k_cache.device)
    direct = (cache_batch_idx is None and cache_leftpad is None and not varlen and cu_seqlens_k_new is None
              and chunk == 0)
    if direct:  # the kernel's own call, its append included
        out, lse = fat.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens,
                                               block_table=page_table, softmax_scale=softmax_scale, causal=causal,
                                               window_size=window, softcap=softcap, num_splits=num_splits,
                                               return_softmax_lse=True)
        return (out, lse) if return_softmax_lse else out
    if page_table is not None:
        _skip("page_table with cache_batch_idx / cache_leftpad / cu_seqlens_q / attention_chunk")
    _compose("cache_batch_idx/cache_leftpad/cu_seqlens_q/cu_seqlens_k_new/attention_chunk")
    idx = cache_batch_idx.long() if cache_batch_idx is not None else None
    kc_sel = k_cache[idx] if idx is not None else k_cache  # a copy with cache_batch_idx, else the cache itself
    vc_sel = v_cache[idx] if idx is not None else v_cache
    seqlens = cache_seqlens.to(torch.int32)
    if cache_leftpad is not None:
        kc, vc = _shifted(kc_sel, cache_leftpad), _shifted(vc_sel, cache_leftpad)
        seqlens = seqlens - cache_leftpad.to(torch.int32)
    else:
        kc, vc = kc_sel, vc_sel
    if k is not None:  # append at seqlens[b] (positions after the shift), as FA3 does at cache_seqlens[b]
        ckn = cu_seqlens_k_new.tolist() if cu_seqlens_k_new is not None else None
        starts = seqlens.tolist()
        new_lens = []
        for b in range(batch):
            kb, vb = (k[ckn[b]:ckn[b + 1]], v[ckn[b]:ckn[b + 1]]) if ckn is not None else (k[b], v[b])
            kc[b, starts[b]:starts[b] + kb.shape[0]] = kb
            vc[b, starts[b]:starts[b] + vb.shape[0]] = vb
            new_lens.append(kb.shape[0])
        seqlens = seqlens + torch.tensor(new_lens, dtype=torch.int32, device=seqlens.device)
        if cache_leftpad is not None:  # shift back
            for b, p in enumerate(cache_leftpad.tolist()):
                kc_sel[b, p:] = kc[b, :kc.shape[1] - p]
                vc_sel[b, p:] = vc[b, :vc.shape[1] - p]
        if idx is not None:
            k_cache[idx] = kc_sel
            v_cache[idx] = vc_sel
    if not varlen and chunk == 0:
        out, lse = fat.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, softmax_scale=softmax_scale,
                                               causal=causal, window_size=window, softcap=softcap,
                                               num_splits=num_splits, return_softmax_lse=True)
        return (out, lse) if return_softmax_lse else out
    cq = cu_seqlens_q.tolist() if varlen else None
    sk_all = seqlens.tolist()
    outs, lses = [], []
    for b in range(batch):
        qb = q[cq[b]:cq[b + 1]].unsqueeze(0) if varlen else q[b:b + 1]
        sq, sk = qb.shape[1], sk_all[b]
        ob = torch.zeros_like(qb)
        lb = torch.full((1, q.shape[-2], sq), float("-inf"), device=q.device, dtype=torch.float32)
        for r0, r1, k0, k1 in _pieces(sq, sk, chunk):
            if r1 <= r0:
                continue
            if chunk == 0:  # the whole sequence: its cache row as it is
                kb, vb, sb = kc[b:b + 1], vc[b:b + 1], seqlens[b:b + 1]
            else:  # one chunk's keys
                kb, vb = kc[b:b + 1, k0:k1].contiguous(), vc[b:b + 1, k0:k1].contiguous()
                sb = torch.tensor([k1 - k0], dtype=torch.int32, device=q.device)
            o, o_lse = fat.flash_attn_with_kvcache(qb[:, r0:r1].contiguous(), kb, vb, cache_seqlens=sb,
                                               softmax_scale=softmax_scale, causal=causal, window_size=window,
                                               softcap=softcap, num_splits=num_splits, return_softmax_lse=True)
            ob[:, r0:r1], lb[:, :, r0:r1] = o, o_lse
        outs.append(ob[0] if varlen else ob)
        lses.append(lb[0] if varlen else lb)
    out = torch.cat(outs, 0)
    lse = torch.cat(lses, 1 if varlen else 0)
    return (out, lse) if return_softmax_lse else out
