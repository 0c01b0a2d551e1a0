"""Runs the masked backward under Triton's interpreter and prints JSON: the block ranges its two passes
walk (masks.key_range, masks.query_range) against the mask's definition ("ranges"), and each case's
gradients against float64 ("gradients"). A script run in a fresh process with TRITON_INTERPRET=1
(interpreted_cases.py says why) with the groups named as arguments ("ranges", "gradients"): a test runs only
the group it checks, so a "not slow" selection never computes the gradients. float16 inputs, tiny shapes.
"""

from __future__ import annotations

import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from mask_reference import keep_mask, reference  # noqa: E402  (beside this script)

from attnprof.kernels import import_from_folder  # noqa: E402

KERNEL = import_from_folder()
UNBOUNDED = KERNEL.flash_api.UNBOUNDED


@triton.jit
def _ranges(Out, sq, sk, off, left, right, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BY_KEYS: tl.constexpr):
    """Out[i] = the four numbers of block i: query_range of key blocks (BY_KEYS) or key_range of row blocks."""
    i = tl.program_id(0)
    if BY_KEYS:
        lo, full_lo, full_hi, hi = KERNEL.masks.query_range(i * BLOCK_N, sq, sk, off, left, right, BLOCK_N, BLOCK_M)
    else:
        lo, full_lo, full_hi, hi = KERNEL.masks.key_range(i * BLOCK_M, sq, sk, off, left, right, BLOCK_M, BLOCK_N)
    tl.store(Out + 4 * i, lo)
    tl.store(Out + 4 * i + 1, full_lo)
    tl.store(Out + 4 * i + 2, full_hi)
    tl.store(Out + 4 * i + 3, hi)


def _runs(numbers, block: int) -> tuple[set, set]:
    """(blocks walked masked, blocks walked plain), as the kernels' three runs walk them."""
    lo, full_lo, full_hi, hi = numbers
    masked = set(range(lo, min(full_lo, hi), block)) | set(range(max(full_lo, full_hi), hi, block))
    plain = set(range(full_lo, full_hi, block))
    assert not masked & plain
    return masked, plain


def _walks(sq, sk, off, left, right, block_m, block_n, by_keys) -> dict:
    """{(row block start, key block start): masked?} for every tile a pass walks."""
    blocks = triton.cdiv(sk, block_n) if by_keys else triton.cdiv(sq, block_m)
    out = torch.zeros(blocks * 4, dtype=torch.int32)
    _ranges[(blocks,)](out, sq, sk, off, left, right, block_m, block_n, by_keys)
    walked = {}
    for i, numbers in enumerate(out.view(-1, 4).tolist()):
        masked, plain = _runs(numbers, block_m if by_keys else block_n)
        for other in masked | plain:
            walked[(other, i * block_n) if by_keys else (i * block_m, other)] = other in masked
    return walked


def _expected(sq, sk, off, left, right, block_m, block_n) -> tuple[set, set]:
    """(tiles with a visible pair, tiles every pair of which is visible), over the sequences' rows and keys."""
    rows, keys = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
    seen = (keys >= rows + off - left) & (keys <= rows + off + right)
    tiles = {(m, n): seen[m:m + block_m, n:n + block_n] for m in range(0, sq, block_m) for n in range(0, sk, block_n)}
    return {t for t, tile in tiles.items() if tile.any()}, {t for t, tile in tiles.items() if tile.all()}


def range_cases() -> dict:
    """Per configuration: both passes walk exactly the tiles with a visible pair; they run plain only
    tiles every pair of which is visible and whose walked block lies inside its sequence (the loads of a
    plain block are unmasked), and every such tile of complete blocks they do run plain."""
    results = {}
    for sq, sk in ((37, 37), (16, 50), (50, 16), (1, 9)):
        for left, right in ((UNBOUNDED, 0), (5, 0), (0, 0), (9, 4), (UNBOUNDED, UNBOUNDED), (2, UNBOUNDED)):
            for off in sorted({sk - sq, 0}):
                for block_m, block_n in ((16, 32), (32, 16)):
                    any_seen, all_seen = _expected(sq, sk, off, left, right, block_m, block_n)
                    by_rows = _walks(sq, sk, off, left, right, block_m, block_n, False)
                    by_keys = _walks(sq, sk, off, left, right, block_m, block_n, True)
                    keys_whole = {t for t in all_seen if t[1] + block_n <= sk}
                    rows_whole = {t for t in all_seen if t[0] + block_m <= sq}
                    results[f"{sq}x{sk} off={off} window=({left},{right}) blocks={block_m}x{block_n}"] = {
                        "rows_walk_what_is_seen": set(by_rows) == any_seen,
                        "keys_walk_what_is_seen": set(by_keys) == any_seen,
                        "plain_only_where_safe": ({t for t, m in by_rows.items() if not m} <= keys_whole
                                                  and {t for t, m in by_keys.items() if not m} <= rows_whole),
                        "whole_tiles_plain": all(not by_rows[t] and not by_keys[t] for t in keys_whole & rows_whole)}
    return results


def _grad_errors(got: list, want: list) -> dict:
    """Each gradient's largest error relative to its largest element."""
    return {name: ((g.grad.double() - w.grad).abs().max() / w.grad.abs().max().clamp_min(1e-30)).item()
            for name, g, w in zip(("dq", "dk", "dv"), got, want, strict=True)}


def _leaves(*tensors):
    ours = [t.requires_grad_() for t in tensors]
    return ours, [t.detach().double().requires_grad_() for t in ours]


def gradient_cases() -> dict:
    """Windows either alignment with unequal lengths, a two-sided window, documents, packed batches
    (MQA), GQA throughout: float16 through our backward against float64 autograd through the reference."""
    gen = torch.Generator().manual_seed(26)

    def randn(*shape):
        return torch.randn(*shape, generator=gen).half()
    errors = {}
    for sq, sk, causal, window in ((24, 56, True, (9, 0)), (56, 24, True, (30, -1)), (40, 40, False, (7, 5))):
        ours, f64 = _leaves(randn(2, sq, 4, 64), randn(2, sk, 2, 64), randn(2, sk, 2, 64))
        weight = randn(2, sq, 4, 64).double()
        (KERNEL.flash_attn_func(*ours, causal=causal, window_size=window).double() * weight).sum().backward()
        keep = keep_mask(sq, sk, causal, window, sk - sq)
        torch.stack([reference(*(t[b] for t in f64), keep)[0] for b in range(2)]).mul(weight).sum().backward()
        errors[f"flash_attn_func {sq}x{sk} causal={causal} window={window}"] = _grad_errors(ours, f64)
    ours, f64 = _leaves(randn(1, 4, 24, 64), randn(1, 2, 40, 64), randn(1, 2, 40, 64))  # [B, H, S, D]: strided
    weight = randn(1, 4, 24, 64).double()
    out = KERNEL.masked_attention(*ours, causal=True, window_size=(5, 0), bottom_right=False)
    (out.double() * weight).sum().backward()
    want = reference(*(t[0].transpose(0, 1) for t in f64), keep_mask(24, 40, True, (5, 0), 0))[0]
    (want.transpose(0, 1)[None] * weight).sum().backward()
    errors["top-left window, [B, H, S, D]"] = _grad_errors(ours, f64)
    errors["documents"] = _documents_case(randn)
    errors |= _varlen_cases(randn)
    errors["packed qkv varlen"] = _packed_qkv_case(randn)
    ours, f64 = _leaves(randn(1, 30, 4, 64), randn(1, 30, 2, 64), randn(1, 30, 2, 64))
    KERNEL.flash_attn_func(*ours, causal=True, window_size=(7, 0)).sum().backward()  # dO of stride 0: copied
    torch.stack([reference(*(t[0] for t in f64), keep_mask(30, 30, True, (7, 0), 0))[0]]).sum().backward()
    errors["out.sum(): a stride-0 dO"] = _grad_errors(ours, f64)
    return errors


def _documents_case(randn) -> dict:
    ours, f64 = _leaves(randn(2, 4, 50, 64), randn(2, 2, 50, 64), randn(2, 2, 50, 64))
    weight = randn(2, 4, 50, 64).double()
    (KERNEL.masked_attention(*ours, causal=True, document_len=16).double() * weight).sum().backward()
    bshd = [t.transpose(1, 2) for t in f64]
    want = torch.cat([torch.stack([reference(*(t[b, s:s + 16] for t in bshd),
                                             keep_mask(min(16, 50 - s), min(16, 50 - s), True, (-1, -1), 0))[0]
                                   for b in range(2)]) for s in range(0, 50, 16)], dim=1)
    (want.transpose(1, 2) * weight).sum().backward()
    return _grad_errors(ours, f64)


def _varlen_cases(randn) -> dict:
    lens_q, lens_k = [1, 17, 40, 5], [1, 30, 40, 9]
    cu_q, cu_k = (torch.tensor([0, *torch.tensor(n).cumsum(0).tolist()], dtype=torch.int32) for n in (lens_q, lens_k))
    errors = {}
    for causal, window in ((True, (-1, -1)), (True, (6, 0)), (False, (3, 2))):
        ours, f64 = _leaves(randn(63, 4, 64), randn(80, 1, 64), randn(80, 1, 64))
        weight = randn(63, 4, 64).double()
        (KERNEL.flash_attn_varlen_func(*ours, cu_q, cu_k, 40, 40, causal=causal, window_size=window).double()
         * weight).sum().backward()
        rows, keys = ([slice(c[i], c[i + 1]) for i in range(4)] for c in (cu_q, cu_k))
        want = torch.cat([reference(f64[0][rows[i]], f64[1][keys[i]], f64[2][keys[i]],
                                    keep_mask(lens_q[i], lens_k[i], causal, window, lens_k[i] - lens_q[i]))[0]
                          for i in range(4)])
        (want * weight).sum().backward()
        errors[f"flash_attn_varlen_func causal={causal} window={window}"] = _grad_errors(ours, f64)
    return errors


def _packed_qkv_case(randn) -> dict:
    """flash_attn_varlen_func on q, k, v sliced from one [T, Hq + 2 Hkv, D] projection (GQA 4/2, a window): the
    gradient of the projection, and how many of q, k, v, dO the passes got as copies (0: all read in place)."""
    lens = [1, 30, 40, 9]
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    (qkv,), (qkv64,) = _leaves(randn(80, 8, 64))
    slices = (slice(0, 4), slice(4, 6), slice(6, 8))
    weight = randn(80, 4, 64).double()
    module = sys.modules[KERNEL.__name__ + ".backward.masked_backward"]
    seen, run = [], module.run_planned

    def recording(plans, key, launches, tensors):
        seen.append(tensors)
        run(plans, key, launches, tensors)

    module.run_planned = recording
    ours = [qkv[:, s] for s in slices]
    (KERNEL.flash_attn_varlen_func(*ours, cu, cu, 40, 40, causal=True, window_size=(6, 0)).double()
     * weight).sum().backward()
    module.run_planned = run
    rows = [slice(cu[i], cu[i + 1]) for i in range(4)]
    want = torch.cat([reference(*(qkv64[rows[i], s] for s in slices), keep_mask(n, n, True, (6, 0), 0))[0]
                      for i, n in enumerate(lens)])
    (want * weight).sum().backward()
    copied = sum(seen[-1][name].data_ptr() != t.data_ptr() or seen[-1][name][0].stride() != t.stride()
                 for name, t in zip("QKV", ours, strict=True))
    error = ((qkv.grad.double() - qkv64.grad).abs().max() / qkv64.grad.abs().max()).item()
    return {"dqkv": error, "inputs_copied": float(copied)}


def single_pass_gradient_cases() -> dict:
    """gradient_cases() through the masked backward as one pass (FLASH_ATTN_TRITON_ATOMIC_DQ=1, read at each
    backward: float32 atomic dQ, delta from the dense backward's preprocess)."""
    os.environ["FLASH_ATTN_TRITON_ATOMIC_DQ"] = "1"
    try:
        return gradient_cases()
    finally:
        del os.environ["FLASH_ATTN_TRITON_ATOMIC_DQ"]


if __name__ == "__main__":
    groups = {"ranges": range_cases, "gradients": gradient_cases, "single_pass_gradients": single_pass_gradient_cases}
    print(json.dumps({group: groups[group]() for group in sys.argv[1:]}))
