"""Runs the plain kernels at head dim 256 and at q/k 192 with v 128 (DeepSeek's MLA prefill) under Triton's
interpreter, forward and backward, and prints each case's errors as JSON (a script run in a fresh process with
TRITON_INTERPRET=1: interpreted_cases.py says why). The groups of cases the arguments name, keyed by group, in one
process (torch, Triton and the kernel take ~4 s to import): "dense" (attention(), the dense forward and the two-pass
backward; also the single pass, FLASH_ATTN_TRITON_ATOMIC_DQ=1), "masked" (a window and packed sequences: the
masked forward and backward, two passes and single), "decode" (flash_attn_with_kvcache, one split and several).
float16, tiny shapes, each error relative to the largest element of its float64 reference
(mask_reference.reference, autograd gradients).
"""

from __future__ import annotations

import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

import torch  # noqa: E402
from mask_reference import keep_mask, reference  # noqa: E402  (beside this script)

from attnprof.kernels import import_from_folder  # noqa: E402

HEAD_DIMS = ((256, 256), (192, 128))  # (q/k, v)


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want).abs().max() / want.abs().max()).item()


def leaves(*shapes, gen):
    return [torch.randn(*shape, generator=gen).half().requires_grad_() for shape in shapes]


def errors_of(out, leaves_, want, f64, weight) -> dict:
    """out's error and its gradients' (of sum(out * weight)) against want's, from float64 leaves f64."""
    grads = torch.autograd.grad((out.float() * weight).sum(), leaves_)
    wants = torch.autograd.grad((want * weight.double()).sum(), f64)
    errors = {"out": relative(out, want.detach())}
    for name, got, ref in zip(("dq", "dk", "dv"), grads, wants, strict=True):
        errors[name] = relative(got, ref) if got.shape == ref.shape else float("inf")
    errors["shapes"] = [list(t.shape) for t in (out, *grads)]
    return errors


def dense_case(kernel, qk: int, v_dim: int, causal: bool, heads_in_columns: bool) -> dict:
    """attention() on [B, H, S, D] (GQA 4/2, 40 queries, 56 keys, causal bottom-right through causal_offset), the
    tensors [B, S, H, D] seen through a transpose with heads_in_columns (a padded Q/K tile's last columns are then
    the next head's: the kernel must not let them in)."""
    gen = torch.Generator().manual_seed(21)
    shapes = ((1, 40, 4, qk), (1, 56, 2, qk), (1, 56, 2, v_dim)) if heads_in_columns else (
        (1, 4, 40, qk), (1, 2, 56, qk), (1, 2, 56, v_dim))
    q, k, v = leaves(*shapes, gen=gen)
    views = [t.transpose(1, 2) for t in (q, k, v)] if heads_in_columns else [q, k, v]
    out = kernel.attention(*views, causal=causal, causal_offset=16 if causal else 0)
    weight = torch.randn(out.shape, generator=gen)
    f64 = [t.detach().double().requires_grad_() for t in views]
    want = reference(*(t[0].transpose(0, 1) for t in f64), keep_mask(40, 56, causal, (-1, -1), 16))[0]
    return errors_of(out, views, want.transpose(0, 1)[None], f64, weight)


def neighbour_inf_case(kernel) -> dict:
    """192/128 on [B, S, H, D] memory (forward): KV head 1's k holds an inf, so its query heads' rows are not finite
    (as SDPA's); a padded Q/K tile of KV head 0 spans head 1's first 64 columns, and must not let the inf in.
    The error of the query heads on KV head 0 against float64, and whether the others are finite."""
    gen = torch.Generator().manual_seed(25)
    q, k, v = (torch.randn(*shape, generator=gen).half() for shape in ((1, 40, 4, 192), (1, 40, 2, 192),
                                                                      (1, 40, 2, 128)))
    k[0, 7, 1, 3] = float("inf")  # head 1's column 3: inside head 0's padded box
    out = kernel.attention(*(t.transpose(1, 2) for t in (q, k, v)), causal=True)
    want = reference(q[0, :, :2].double(), k[0, :, :1].double(), v[0, :, :1].double(),
                     keep_mask(40, 40, True, (-1, -1), 0))[0]
    return {"out": relative(out[0, :2].transpose(0, 1), want), "others_finite": bool(out[0, 2:].isfinite().all())}


def window_case(kernel, qk: int, v_dim: int) -> dict:
    """masked_attention with a window (12 left, causal) on [B, H, S, D], GQA 4/2, 48 queries and keys."""
    gen = torch.Generator().manual_seed(22)
    q, k, v = leaves((1, 4, 48, qk), (1, 2, 48, qk), (1, 2, 48, v_dim), gen=gen)
    out = kernel.masked_attention(q, k, v, causal=True, window_size=(12, -1))
    weight = torch.randn(out.shape, generator=gen)
    f64 = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want = reference(*(t[0].transpose(0, 1) for t in f64), keep_mask(48, 48, True, (12, -1), 0))[0]
    return errors_of(out, [q, k, v], want.transpose(0, 1)[None], f64, weight)


def varlen_case(kernel, qk: int, v_dim: int) -> dict:
    """flash_attn_varlen_func, causal, over two packed sequences of 18 and 33 tokens (GQA 4/2)."""
    gen = torch.Generator().manual_seed(23)
    q, k, v = leaves((51, 4, qk), (51, 2, qk), (51, 2, v_dim), gen=gen)
    cu = torch.tensor([0, 18, 51], dtype=torch.int32)
    out = kernel.flash_attn_varlen_func(q, k, v, cu, cu, 33, 33, causal=True)
    weight = torch.randn(out.shape, generator=gen)
    f64 = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want = torch.cat([reference(*(t[a:b] for t in f64), keep_mask(b - a, b - a, True, (-1, -1), 0))[0]
                      for a, b in ((0, 18), (18, 51))])
    return errors_of(out, [q, k, v], want, f64, weight)


def decode_case(kernel, qk: int, v_dim: int, splits: int) -> dict:
    """flash_attn_with_kvcache: 2 new queries of 8 heads against caches of 70 and 41 keys (2 KV heads), causal."""
    gen = torch.Generator().manual_seed(24)
    q = torch.randn(2, 2, 8, qk, generator=gen).half()
    k_cache = torch.randn(2, 80, 2, qk, generator=gen).half()
    v_cache = torch.randn(2, 80, 2, v_dim, generator=gen).half()
    lens = torch.tensor([70, 41], dtype=torch.int32)
    out = kernel.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, causal=True, num_splits=splits)
    worst = 0.0
    for b, n in enumerate(lens.tolist()):
        want = reference(q[b], k_cache[b, :n], v_cache[b, :n], keep_mask(2, n, True, (-1, -1), n - 2))[0]
        worst = max(worst, relative(out[b], want))
    return {"out": worst, "shapes": [list(out.shape)]}


def main(kernel, group: str) -> dict:
    results = {}
    for qk, v_dim in HEAD_DIMS:
        dims = f"d{qk}/{v_dim}"
        if group == "dense":
            for causal in (False, True):
                results[f"{dims} causal={causal}"] = dense_case(kernel, qk, v_dim, causal, heads_in_columns=causal)
            if v_dim < qk:
                results["d192/128 inf in the next head's k"] = neighbour_inf_case(kernel)
            os.environ["FLASH_ATTN_TRITON_ATOMIC_DQ"] = "1"  # the single pass (atomic dQ), read at each backward
            results[f"{dims} single pass causal=True"] = dense_case(kernel, qk, v_dim, True, True)
            del os.environ["FLASH_ATTN_TRITON_ATOMIC_DQ"]
        elif group == "masked":
            results[f"{dims} window"] = window_case(kernel, qk, v_dim)
            results[f"{dims} varlen"] = varlen_case(kernel, qk, v_dim)
            os.environ["FLASH_ATTN_TRITON_ATOMIC_DQ"] = "1"  # the masked single pass, read at each backward
            results[f"{dims} window single pass"] = window_case(kernel, qk, v_dim)
            results[f"{dims} varlen single pass"] = varlen_case(kernel, qk, v_dim)
            del os.environ["FLASH_ATTN_TRITON_ATOMIC_DQ"]
        else:
            for splits in (1, 3):
                results[f"{dims} splits={splits}"] = decode_case(kernel, qk, v_dim, splits)
    return results


if __name__ == "__main__":
    kernel = import_from_folder()
    print(json.dumps({group: main(kernel, group) for group in sys.argv[1:]}))
