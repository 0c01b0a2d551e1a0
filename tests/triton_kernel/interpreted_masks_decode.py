"""Runs the split-KV decode and the masked forward under Triton's interpreter and prints each case's error
against float64 as JSON (a script run in a fresh process with TRITON_INTERPRET=1: interpreted_cases.py
says why). float16 inputs, tiny shapes; the references build each mask from its definition, key by key.
"""

from __future__ import annotations

import json
import os

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

import torch  # noqa: E402
from mask_reference import keep_mask, reference  # noqa: E402  (beside this script)

from attnprof.kernels import import_from_folder  # noqa: E402


def randn(*shape, gen):
    return torch.randn(*shape, generator=gen).half()


def error(got, want) -> float:
    finite = torch.isfinite(want)
    if not torch.equal(finite, torch.isfinite(got.double())):
        return float("inf")
    return (got.double()[finite] - want[finite]).abs().max().item() if finite.any() else 0.0


def decode_cases(kernel) -> dict:
    """Ragged caches (one empty, one shorter than the queries), GQA, with and without a split, the split's
    partials combined by a second kernel or by each tile's last split; K and V through TMA descriptors (the
    default) or pointer loads ("tma=False": the interpreter's tile, 16 keys a block)."""
    gen = torch.Generator().manual_seed(0)
    q = randn(4, 3, 4, 64, gen=gen)
    k_cache, v_cache = randn(4, 70, 2, 64, gen=gen), randn(4, 70, 2, 64, gen=gen)
    lens = torch.tensor([70, 33, 2, 0], dtype=torch.int32)
    errors = {}
    # 3 splits of 6-row tiles: a combine kernel, or fused
    for splits, fused, tma in ((1, None, True), (3, None, True), (3, True, True), (1, None, False), (3, True, False)):
        for causal, window in ((True, (-1, -1)), (False, (-1, -1)), (True, (10, 0)), (False, (5, 1))):
            if fused or not tma:
                out, lse = kernel.decode.decode(q, k_cache, v_cache, lens, 64 ** -0.5,
                                                kernel.flash_api.window_bounds(causal, window), splits, fused=fused,
                                                config=(16, 1, tma))
            else:
                out, lse = kernel.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, causal=causal,
                                                          window_size=window, num_splits=splits,
                                                          return_softmax_lse=True)
            worst = 0.0
            for b, n in enumerate(lens.tolist()):
                want, want_lse = reference(q[b], k_cache[b, :n], v_cache[b, :n], keep_mask(3, n, causal, window, n - 3))
                worst = max(worst, error(out[b], want), error(lse[b], want_lse))
            pointers = "" if tma else "-tma=False"
            errors[f"splits={splits}-fused={fused}-causal={causal}-window={window}{pointers}"] = worst
    return errors


def many_splits_case(kernel) -> float:
    """The fused combine over more splits than one of its loads takes (_decode_combine._combine_tile: 8 splits a
    load at 16 rows of 64 columns): 13 splits of 16 keys, the second load's splits holding keys too."""
    gen = torch.Generator().manual_seed(1)
    q = randn(2, 1, 4, 64, gen=gen)
    k_cache, v_cache = randn(2, 200, 2, 64, gen=gen), randn(2, 200, 2, 64, gen=gen)
    lens = torch.tensor([200, 150], dtype=torch.int32)
    causal = kernel.flash_api.window_bounds(True, (-1, -1))
    out, lse = kernel.decode.decode(q, k_cache, v_cache, lens, 64 ** -0.5, causal, 13, fused=True, config=(16, 1, True))
    worst = 0.0
    for b, n in enumerate(lens.tolist()):
        want, want_lse = reference(q[b], k_cache[b, :n], v_cache[b, :n], keep_mask(1, n, True, (-1, -1), n - 1))
        worst = max(worst, error(out[b], want), error(lse[b], want_lse))
    return worst


def append_case(kernel) -> float:
    """k and v given: written into the cache at cache_seqlens, then attended to (int cache_seqlens)."""
    gen = torch.Generator().manual_seed(1)
    q, k_new, v_new = randn(2, 2, 4, 64, gen=gen), randn(2, 2, 1, 64, gen=gen), randn(2, 2, 1, 64, gen=gen)
    k_cache, v_cache = randn(2, 40, 1, 64, gen=gen), randn(2, 40, 1, 64, gen=gen)
    out = kernel.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=30, causal=True)
    assert torch.equal(k_cache[:, 30:32], k_new) and torch.equal(v_cache[:, 30:32], v_new)
    return max(error(out[b], reference(q[b], k_cache[b, :32], v_cache[b, :32], keep_mask(2, 32, True, (-1, -1), 30))[0])
               for b in range(2))


def paged_cases(kernel) -> dict:
    """A paged cache (block_table): 4 sequences of 150, 64, 0 and 3 keys in pages of 64 rows handed out in a
    shuffled order, every row no sequence holds set to NaN (never to be read into a result), GQA 4/2, q-len 2,
    at 1 split, a combine kernel and the fused combine, and by pointer loads; then two new keys appended through
    the table."""
    gen = torch.Generator().manual_seed(4)
    batch, pages_each, page, lens = 4, 3, 64, [150, 64, 0, 3]
    q = randn(batch, 2, 4, 64, gen=gen)
    dense_k, dense_v = randn(batch, pages_each * page, 2, 64, gen=gen), randn(batch, pages_each * page, 2, 64, gen=gen)
    table = torch.randperm(batch * pages_each, generator=gen).reshape(batch, pages_each).to(torch.int32)
    k_pages, v_pages = (torch.full((batch * pages_each, page, 2, 64), float("nan")).half() for _ in range(2))
    for b, n in enumerate(lens):
        for j in range(n):
            k_pages[table[b, j // page], j % page] = dense_k[b, j]
            v_pages[table[b, j // page], j % page] = dense_v[b, j]
    seqlens = torch.tensor(lens, dtype=torch.int32)
    errors = {}
    for splits, fused, tma in ((1, None, True), (3, False, True), (3, True, True), (3, False, False)):
        out, lse = kernel.decode.decode(q, k_pages, v_pages, seqlens, 64 ** -0.5,
                                        kernel.flash_api.window_bounds(True, (-1, -1)), splits, fused=fused,
                                        config=(16, 1, tma), block_table=table)
        errors[f"splits={splits}-fused={fused}{'' if tma else '-tma=False'}"] = max(
            max(error(out[b], want), error(lse[b], want_lse)) for b, n in enumerate(lens)
            for want, want_lse in [reference(q[b], dense_k[b, :n], dense_v[b, :n], keep_mask(2, n, True, (-1, -1),
                                                                                             n - 2))])
    new_k, new_v = randn(batch, 2, 2, 64, gen=gen), randn(batch, 2, 2, 64, gen=gen)
    out = kernel.flash_attn_with_kvcache(q, k_pages, v_pages, new_k, new_v, cache_seqlens=seqlens, causal=True,
                                         block_table=table)
    worst = 0.0
    for b, n in enumerate(lens):
        keys, values = torch.cat([dense_k[b, :n], new_k[b]]), torch.cat([dense_v[b, :n], new_v[b]])
        worst = max(worst, error(out[b], reference(q[b], keys, values, keep_mask(2, n + 2, True, (-1, -1), n))[0]))
    errors["append"] = worst
    return errors


def window_cases(kernel) -> dict:
    """flash_attn_func with windows, more keys than queries and more queries than keys (GQA 4/2); causal with more
    queries than keys and no window too (the masked kernel's: the dense one refuses it)."""
    gen = torch.Generator().manual_seed(2)
    errors = {}
    for sq, sk, causal, window in ((40, 40, True, (7, -1)), (40, 40, False, (20, 5)), (24, 56, True, (9, 0)),
                                   (56, 24, True, (30, -1)), (37, 37, False, (0, 0)), (56, 24, True, (-1, -1))):
        q, k, v = randn(2, sq, 4, 64, gen=gen), randn(2, sk, 2, 64, gen=gen), randn(2, sk, 2, 64, gen=gen)
        out, lse, _ = kernel.flash_attn_func(q, k, v, causal=causal, window_size=window, return_attn_probs=True)
        keep = keep_mask(sq, sk, causal, window, sk - sq)
        wants = [reference(q[b], k[b], v[b], keep) for b in range(2)]
        errors[f"{sq}x{sk}-causal={causal}-window={window}"] = max(
            max(error(out[b], want), error(lse[b], want_lse)) for b, (want, want_lse) in enumerate(wants))
    q, k, v = randn(1, 2, 24, 64, gen=gen), randn(1, 2, 40, 64, gen=gen), randn(1, 2, 40, 64, gen=gen)
    out = kernel.masked_attention(q, k, v, causal=True, window_size=(5, 0), bottom_right=False)  # [B, H, S, D]
    want = reference(q[0].transpose(0, 1), k[0].transpose(0, 1), v[0].transpose(0, 1),
                     keep_mask(24, 40, True, (5, 0), 0))[0]
    errors["top-left"] = error(out[0].transpose(0, 1), want)
    return errors


def varlen_cases(kernel) -> dict:
    """A packed batch of 1-40 tokens (MQA), and documents of one row."""
    gen = torch.Generator().manual_seed(3)
    lens_q, lens_k = [1, 17, 40, 5], [1, 30, 40, 9]
    cu_q, cu_k = (torch.tensor([0, *torch.tensor(n).cumsum(0).tolist()], dtype=torch.int32) for n in (lens_q, lens_k))
    q, k, v = randn(63, 4, 64, gen=gen), randn(80, 1, 64, gen=gen), randn(80, 1, 64, gen=gen)
    errors = {}
    for causal, window in ((True, (-1, -1)), (False, (-1, -1)), (True, (6, 0))):
        out = kernel.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 40, 40, causal=causal, window_size=window)
        worst = 0.0
        for i in range(4):
            rows, keys = slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])
            keep = keep_mask(lens_q[i], lens_k[i], causal, window, lens_k[i] - lens_q[i])
            worst = max(worst, error(out[rows], reference(q[rows], k[keys], v[keys], keep)[0]))
        errors[f"varlen-causal={causal}-window={window}"] = worst
    q, k, v = randn(2, 4, 50, 64, gen=gen), randn(2, 2, 50, 64, gen=gen), randn(2, 2, 50, 64, gen=gen)
    out = kernel.masked_attention(q, k, v, causal=True, document_len=16).transpose(1, 2)
    bshd = [t.transpose(1, 2) for t in (q, k, v)]
    errors["documents"] = max(error(out[b, s:s + 16], reference(*(t[b, s:s + 16] for t in bshd),
                                                                  keep_mask(min(16, 50 - s), min(16, 50 - s), True,
                                                                            (-1, -1), 0))[0])
                              for b in range(2) for s in range(0, 50, 16))
    return errors


if __name__ == "__main__":
    module = import_from_folder()
    print(json.dumps({"decode": decode_cases(module), "append": append_case(module),
                      "many_splits": many_splits_case(module), "windows": window_cases(module),
                      "varlen": varlen_cases(module), "paged": paged_cases(module)}))
