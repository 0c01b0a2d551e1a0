"""Runs the two-pass backward under Triton's interpreter on the caller's layouts and prints, per case, its
gradients' errors against float64, which inputs the passes got where they lie, and the gradients' layouts.

A script (interpreted_cases.py says why); test_backward_layouts.py runs it with TRITON_INTERPRET=1.
"""

from __future__ import annotations

import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

import torch  # noqa: E402

from attnprof.kernels import import_from_folder  # noqa: E402

HEADS, KV_HEADS, SEQ = 4, 2, 37  # GQA 4/2, a length no multiple of any block


BOUNDS = ((0, HEADS), (HEADS, HEADS + KV_HEADS), (HEADS + KV_HEADS, HEADS + 2 * KV_HEADS))  # packed q, k, v


def leaves(layout: str, head_dim: int, gen) -> list[torch.Tensor]:
    """The tensors autograd accumulates into: [B, H, S, D] q, k, v ("bhsd"), [B, S, H, D] ones ("bshd", flash-attn's
    memory) or one packed [B, S, Hq + 2 Hkv, D] projection ("packed_qkv"); "mixed": q, k [B, S, H, D], v [B, H, S, D]
    (K's and V's rows a different distance apart)."""
    if layout == "packed_qkv":
        return [torch.randn(1, SEQ, HEADS + 2 * KV_HEADS, head_dim, generator=gen).half().requires_grad_()]
    shapes = [(2, heads, SEQ, head_dim) for heads in (HEADS, KV_HEADS, KV_HEADS)]
    tensors = [torch.randn(s, generator=gen).half() for s in shapes]
    if layout in ("bshd", "mixed"):
        tensors = [t.transpose(1, 2).contiguous() for t in tensors[:2]] + [
            tensors[2] if layout == "mixed" else tensors[2].transpose(1, 2).contiguous()]
    return [t.requires_grad_() for t in tensors]


def views_of(layout: str, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The [B, H, S, D] q, k, v the kernel is called with, views of the leaves (no copy)."""
    if layout == "packed_qkv":
        return [tensors[0][:, :, a:b].transpose(1, 2) for a, b in BOUNDS]
    if layout == "mixed":
        return [tensors[0].transpose(1, 2), tensors[1].transpose(1, 2), tensors[2]]
    return tensors if layout == "bhsd" else [t.transpose(1, 2) for t in tensors]


def reference_grads(layout: str, kernel_leaves: list[torch.Tensor], causal: bool, dout) -> list[torch.Tensor]:
    """float64 gradients of the same leaves through the same views (SDPA's math, GQA by repeating heads)."""
    leaves64 = [t.detach().double().requires_grad_() for t in kernel_leaves]
    q, k, v = views_of(layout, leaves64)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    out.backward(dout.double())
    return [t.grad for t in leaves64]


def spy_on_passes(kernel) -> list[dict]:
    """Record the tensors each backward hands its passes (the module's run_planned, wrapped)."""
    module = sys.modules[kernel.__name__ + ".backward._backward"]
    seen, run = [], module.run_planned

    def recording(plans, key, launches, tensors):
        seen.append(dict(tensors))
        return run(plans, key, launches, tensors)

    module.run_planned = recording
    return seen


def case(kernel, seen: list, layout: str, head_dim: int, causal: bool, expanded_dout: bool = False) -> dict:
    gen = torch.Generator().manual_seed(head_dim + causal)
    kernel_leaves = leaves(layout, head_dim, gen)
    q, k, v = views_of(layout, kernel_leaves)
    out = kernel.attention(q, k, v, causal=causal)
    dout = (torch.ones(()).half().expand(out.shape) if expanded_dout  # what out.sum().backward() hands over
            else torch.randn(out.shape, generator=gen).half())
    out.backward(dout)
    want = reference_grads(layout, kernel_leaves, causal, dout)
    got = seen[-1]
    errors = [((t.grad.double() - w).abs().max() / w.abs().max()).item()
              for t, w in zip(kernel_leaves, want, strict=True)]
    heads_outer = [layout == "bhsd"] * 2 + [layout in ("bhsd", "mixed")]  # else [B, S, H, D]: so the gradient
    return {"max_relative_error": max(errors),
            "read_in_place": {name: got[name] is t for name, t in (("Q", q), ("K", k), ("V", v), ("dO", dout))},
            "out_read_in_place": got["Out"].data_ptr() == out.data_ptr(),
            "grads_in_inputs_layout": [(g if outer else g.transpose(1, 2)).is_contiguous() for g, outer in
                                       zip((got["dQ"], got["dK"], got["dV"]), heads_outer, strict=True)]}


if __name__ == "__main__":
    kernel = import_from_folder()
    seen = spy_on_passes(kernel)
    results = {f"{layout}-d{head_dim}-causal={causal}": case(kernel, seen, layout, head_dim, causal)
               for layout in ("bhsd", "bshd", "packed_qkv") for head_dim in (64, 128) for causal in (False, True)}
    results["mixed-d128-causal=True"] = case(kernel, seen, "mixed", 128, True)
    results["copied:expanded_dout"] = case(kernel, seen, "bshd", 64, True, expanded_dout=True)
    print(json.dumps(results))
