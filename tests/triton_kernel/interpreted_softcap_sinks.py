"""Runs the masked kernel's soft-capping (Gemma-2) and learnable sinks (gpt-oss), forward and backward, under
Triton's interpreter and prints each case's error as JSON (a script run in a fresh process with
TRITON_INTERPRET=1: interpreted_cases.py says why). float16 inputs, tiny shapes. References: float64 by
definition (mask_reference.reference: softcap's formula, gpt-oss's eager sink softmax) with its autograd
gradients, and flex_attention with Gemma-2's score_mod (forward: its eager CPU path has no backward).
"""

from __future__ import annotations

import json
import os

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

import torch  # noqa: E402
from mask_reference import keep_mask, reference  # noqa: E402  (beside this script)

from attnprof.kernels import import_from_folder  # noqa: E402

CAP = 2.0  # small enough that tanh bends the scores of randn inputs (Gemma-2 uses 50 on larger logits)


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want).abs().max() / want.abs().max()).item()


def leaves(*shapes, gen):
    return [torch.randn(*shape, generator=gen).half().requires_grad_() for shape in shapes]


def dense_case(kernel, causal: bool, softcap: float, with_sink: bool) -> dict:
    """masked_attention on [B, H, S, D] (GQA 4/2, 40 queries, 56 keys, bottom-right causal) against float64:
    out, dq, dk, dv and the sink's gradient, each relative to its largest element."""
    gen = torch.Generator().manual_seed(7)
    q, k, v = leaves((1, 4, 40, 64), (1, 2, 56, 64), (1, 2, 56, 64), gen=gen)
    sink = (torch.randn(4, generator=gen) * 2).requires_grad_() if with_sink else None
    weight = torch.randn(1, 4, 40, 64, generator=gen)
    out = kernel.masked_attention(q, k, v, causal=causal, softcap=softcap, learnable_sink=sink)
    mine = [q, k, v] + ([sink] if with_sink else [])
    grads = torch.autograd.grad((out.float() * weight).sum(), mine)
    f64 = [t.detach().double().requires_grad_() for t in mine]
    keep = keep_mask(40, 56, causal, (-1, -1), 16)
    want = reference(*(t[0].transpose(0, 1) for t in f64[:3]), keep, softcap, f64[3] if with_sink else None)[0]
    want = want.transpose(0, 1)[None]
    wants = torch.autograd.grad((want * weight.double()).sum(), f64)
    errors = {"out": relative(out, want.detach())}
    for name, got, ref in zip(("dq", "dk", "dv", "dsink"), grads, wants, strict=False):
        errors[name] = relative(got, ref)
    return errors


def flex_case(kernel) -> dict:
    """The float64 reference and our kernel against flex_attention with Gemma-2's score_mod (causal)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    gen = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(1, 2, 48, 64, generator=gen).half() for _ in range(3))
    mask = create_block_mask(lambda b, h, qi, ki: ki <= qi, None, None, 48, 48, device="cpu")
    flex = flex_attention(*(t.double() for t in (q, k, v)), block_mask=mask,
                          score_mod=lambda s, b, h, qi, ki: CAP * torch.tanh(s / CAP))
    ours = kernel.masked_attention(q, k, v, causal=True, softcap=CAP)
    keep = keep_mask(48, 48, True, (-1, -1), 0)
    ref = reference(*(t[0].transpose(0, 1) for t in (q, k, v)), keep, CAP)[0].transpose(0, 1)[None]
    uncapped = reference(*(t[0].transpose(0, 1) for t in (q, k, v)), keep)[0].transpose(0, 1)[None]
    return {"ours_vs_flex": relative(ours, flex), "reference_vs_flex": relative(ref, flex),
            "uncapped_vs_flex": relative(uncapped, flex)}  # what ignoring the cap would cost


def varlen_case(kernel) -> float:
    """flash_attn_varlen_func with softcap and sinks over two packed sequences (one of them shorter than its
    window), each against float64 alone."""
    gen = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(50, 4, 64, generator=gen).half() for _ in range(3))
    sink = torch.randn(4, generator=gen)
    cu = torch.tensor([0, 18, 50], dtype=torch.int32)
    out = kernel.flash_attn_varlen_func(q, k, v, cu, cu, 32, 32, causal=True, window_size=(20, 0), softcap=CAP,
                                        learnable_sink=sink)
    worst = 0.0
    for start, end in ((0, 18), (18, 50)):
        keep = keep_mask(end - start, end - start, True, (20, 0), 0)
        want = reference(q[start:end], k[start:end], v[start:end], keep, CAP, sink)[0]
        worst = max(worst, relative(out[start:end], want))
    return worst


def decode_cases(kernel) -> dict:
    """flash_attn_with_kvcache with softcap and sinks over ragged caches (one empty: its rows are the sink's
    alone, out 0), GQA 4/2: without a split, with a combine kernel, with the fused combine."""
    gen = torch.Generator().manual_seed(10)
    q = torch.randn(3, 2, 4, 64, generator=gen).half()
    k_cache, v_cache = (torch.randn(3, 70, 2, 64, generator=gen).half() for _ in range(2))
    lens = torch.tensor([70, 21, 0], dtype=torch.int32)
    sink = torch.randn(4, generator=gen)
    errors = {}
    for splits, fused in ((1, None), (3, False), (3, True)):
        out, lse = kernel.decode.decode(q, k_cache, v_cache, lens, 64 ** -0.5, kernel.flash_api.window_bounds(
            True, (-1, -1)), splits, fused=fused, softcap=CAP, sink=sink)
        worst = 0.0
        for b, n in enumerate(lens.tolist()):
            want, want_lse = reference(q[b], k_cache[b, :n], v_cache[b, :n], keep_mask(2, n, True, (-1, -1), n - 2),
                                       CAP, sink)
            worst = max(worst, (out[b].double() - want).abs().max().item(), (lse[b] - want_lse).abs().max().item())
        errors[f"splits={splits}-fused={fused}"] = worst
    out = kernel.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, causal=True, softcap=CAP,
                                         learnable_sink=sink)
    errors["flash_attn_with_kvcache"] = max(
        (out[b].double() - reference(q[b], k_cache[b, :n], v_cache[b, :n], keep_mask(2, n, True, (-1, -1), n - 2),
                                     CAP, sink)[0]).abs().max().item() for b, n in enumerate(lens.tolist()))
    return errors


def main() -> None:
    kernel = import_from_folder()
    cases = {f"causal={c}-softcap={cap}-sink={s}": dense_case(kernel, c, cap, s)
             for c, cap, s in ((True, CAP, False), (False, CAP, False), (True, 0.0, True), (False, CAP, True))}
    os.environ["FLASH_ATTN_TRITON_ATOMIC_DQ"] = "1"  # the masked single pass (float32 atomic dQ), read per backward
    single = dense_case(kernel, False, CAP, True)
    del os.environ["FLASH_ATTN_TRITON_ATOMIC_DQ"]
    print(json.dumps({"dense": cases, "dense_single_pass": single, "flex": flex_case(kernel),
                      "varlen": varlen_case(kernel), "decode": decode_cases(kernel)}))


if __name__ == "__main__":
    main()
