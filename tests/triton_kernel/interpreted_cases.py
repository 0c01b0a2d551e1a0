"""Runs attnprof's Triton attention under Triton's interpreter and prints each case's error as JSON.

A script, not a test module: the interpreter must be on before triton is first imported (triton's own
jit helpers such as tl.cdiv are built at that import), so test_flash_attn_triton.py runs this in a
fresh process with TRITON_INTERPRET=1. Inputs are float16: the interpreter multiplies bfloat16 dot
operands as raw bits (triton-lang/triton#11584).
"""

from __future__ import annotations

import json
import math
import os

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

import torch  # noqa: E402
from triton import Config  # noqa: E402

from attnprof.kernels import import_from_folder  # noqa: E402

SHAPES = {  # batch, heads, kv heads, query length, key length, head dim
    "batch2": (2, 2, 2, 48, 48, 64),  # batch > 1: each batch must read its own keys
    "gqa_ragged_d128": (1, 4, 2, 40, 40, 128),  # GQA, length not a multiple of any block
    "more_keys": (1, 2, 1, 24, 56, 64),
}
LOOP_FORMS = {"fused": (True, False), "fused_persistent": (True, True), "split_persistent": (False, True)}


def reference(q, k, v, causal, causal_off=0):
    """float64 attention and its natural-log LSE on [B, H, S, D], key/value heads repeated for GQA."""
    group = q.shape[1] // k.shape[1]
    k, v = (t.double().repeat_interleave(group, dim=1) for t in (k, v))
    scores = q.double() @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        hidden = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1 + causal_off)
        scores = scores.masked_fill(hidden, float("-inf"))
    return scores.softmax(-1) @ v, scores.logsumexp(-1)


def inputs(batch, heads, kv_heads, sq, sk, head_dim, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, sq, head_dim, generator=gen).half()
    k, v = (torch.randn(batch, kv_heads, sk, head_dim, generator=gen).half() for _ in range(2))
    return q, k, v


def max_error(got, want) -> float:
    return (got.double() - want).abs().max().item()


def forward_cases(kernel) -> dict:
    errors = {}
    for name, shape in SHAPES.items():
        q, k, v = inputs(*shape)
        for causal in (False, True):
            out, lse = kernel.attention(q, k, v, causal=causal, return_lse=True)
            want, want_lse = reference(q, k, v, causal)
            errors[f"{name}-causal={causal}"] = {"out": max_error(out, want), "lse": max_error(lse, want_lse),
                                                 "same_shape_and_dtype": out.shape == q.shape and out.dtype == q.dtype}
    return errors


def loop_form_cases(kernel) -> dict:
    errors = {}
    q, k, v = inputs(2, 2, 1, 40, 40, 64, seed=1)
    for name, (fused, persistent) in LOOP_FORMS.items():
        config = Config({"BLOCK_M": 16, "BLOCK_N": 16, "FUSED_LOOP": fused, "WARP_SPECIALIZE": fused,
                         "PERSISTENT": persistent}, num_warps=4, num_stages=1)
        for causal in (False, True):
            out, _ = kernel._launch.forward(q, k, v, causal=causal, sm_scale=None, config=config)
            errors[f"{name}-causal={causal}"] = max_error(out, reference(q, k, v, causal)[0])
    return errors


def head_group_case(kernel) -> float:
    """Causal tiles interleaved across groups of 2 heads, the last group holding the fifth head alone."""
    q, k, v = inputs(1, 5, 5, 40, 40, 64, seed=4)
    launch = kernel._launch
    launch.L2_GROUP_BYTES = 2 * (2 * 40 * 64 * q.element_size())  # room for the keys and values of 2 heads
    assert launch.head_group({"CAUSAL": True, "PERSISTENT": False, "SK": 40, "HEAD_DIM": 64, "Q": q, "GROUP": 1,
                              "n_bh": 5}) == 2
    out, _ = launch.forward(q, k, v, causal=True, sm_scale=None, config=launch.INTERPRETER_CONFIG)
    return max_error(out, reference(q, k, v, causal=True)[0])


def flash_attn_func_case(kernel) -> float:
    q, k, v = inputs(1, 2, 2, 16, 40, 64, seed=2)
    out = kernel.flash_attn_func(*(t.transpose(1, 2) for t in (q, k, v)), causal=True)
    return max_error(out.transpose(1, 2), reference(q, k, v, causal=True, causal_off=40 - 16)[0])


def flash_attn_func_gradient_case(kernel) -> dict:
    """flash_attn_func on [B, S, H, D] inputs (GQA, causal, a ragged length): whether its output is a
    contiguous [B, S, H, D] (flash-attn's), and each gradient's max error relative to its largest element."""
    q, k, v = (t.requires_grad_() for t in bshd(2, 4, 2, 33, 64, seed=13))
    out = kernel.flash_attn_func(q, k, v, causal=True)
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(14)).half()
    out.backward(dout)
    q64, k64, v64 = (t.detach().double().transpose(1, 2).requires_grad_() for t in (q, k, v))
    reference(q64, k64, v64, True)[0].backward(dout.double().transpose(1, 2))
    errors = {name: max_error(got.grad, want.grad.transpose(1, 2)) / want.grad.abs().max().item()
              for name, got, want in (("dq", q, q64), ("dk", k, k64), ("dv", v, v64))}
    return {"output_contiguous_bshd": out.is_contiguous() and out.shape == q.shape, **errors}


def bshd(batch, heads, kv_heads, seq, head_dim, seed):
    """q, k, v as flash-attn takes them: [B, S, H, D] contiguous."""
    q, k, v = inputs(batch, heads, kv_heads, seq, seq, head_dim, seed=seed)
    return [t.transpose(1, 2).contiguous() for t in (q, k, v)]


def layout_cases(kernel) -> dict:
    """Each layout's max error against float64, whether the kernel read each input where it lies (no copy),
    and whether the output came back in the query's layout (so the caller's transpose back is free)."""
    launch_args = kernel._launch.launch_args
    packed = torch.randn(2, 40, 3, 4, 64, generator=torch.Generator().manual_seed(8)).half()  # [B, S, 3, H, D]
    q, k, v = inputs(1, 2, 2, 24, 24, 64, seed=12)
    unaligned = torch.empty(q.numel() + 1, dtype=q.dtype)[1:].view_as(q).copy_(q)  # 2 bytes off 16
    layouts = {  # name: ([B, H, S, D] views of q, k, v; the layout their output should have, [B, S, H, D] or not)
        "bshd": ([t.transpose(1, 2) for t in bshd(2, 3, 3, 45, 64, seed=10)], True),
        "bshd_gqa_ragged_d128": ([t.transpose(1, 2) for t in bshd(1, 4, 2, 37, 128, seed=9)], True),
        "packed_qkv": ([packed[:, :, i].transpose(1, 2) for i in range(3)], True),
        "heads_sliced": ([t[:, 1:3] for t in inputs(2, 4, 4, 24, 24, 64, seed=11)], False),  # heads in rows
        "copied:last_dim_strided": ([q.transpose(-1, -2).contiguous().transpose(-1, -2), k, v], False),
        "copied:unaligned": ([unaligned, k, v], False),
    }
    results = {}
    for name, ((q, k, v), bshd_out) in layouts.items():
        for causal in (False, True):
            out = kernel.attention(q, k, v, causal=causal)
            args, _ = launch_args(q, k, v, causal, None)
            results[f"{name}-causal={causal}"] = {
                "error": max_error(out, reference(*(t.contiguous() for t in (q, k, v)), causal)[0]),
                "read_in_place": [args[n] is t for n, t in zip("QKV", (q, k, v), strict=True)],
                "output_layout": (out.transpose(1, 2) if bshd_out else out).is_contiguous()}
    return results


GRADIENT_SHAPES = {  # batch, heads, kv heads, query length, key length, head dim, causal, causal offset
    "full": (1, 2, 2, 48, 48, 64, False, 0),
    "causal": (1, 2, 2, 48, 48, 64, True, 0),
    "gqa_odd_causal": (1, 4, 2, 37, 37, 64, True, 0),  # GQA, a length no multiple of any block
    "more_keys_d128_causal": (1, 2, 1, 19, 53, 128, True, 53 - 19),  # bottom-right diagonal, GQA 2/1
    "batch2_odd_full": (2, 2, 2, 33, 33, 64, False, 0),
}


def gradient_cases(kernel) -> dict:
    """Each gradient's max error relative to its largest element, against float64 autograd, for the
    two-pass backward (the default) and the single pass (atomic dQ, FLASH_ATTN_TRITON_ATOMIC_DQ=1)."""
    errors = {}
    for name, (*shape, causal, offset) in GRADIENT_SHAPES.items():
        for strategy, atomic in (("two_pass", "0"), ("single", "1")):
            os.environ["FLASH_ATTN_TRITON_ATOMIC_DQ"] = atomic
            q, k, v = (t.requires_grad_() for t in inputs(*shape, seed=5))
            out = kernel.attention(q, k, v, causal=causal, causal_offset=offset)
            dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).half()
            out.backward(dout)
            q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
            reference(q64, k64, v64, causal, offset)[0].backward(dout.double())
            for grad, got, want in (("dq", q, q64), ("dk", k, k64), ("dv", v, v64)):
                errors[f"{name}-{strategy}-{grad}"] = max_error(got.grad, want.grad) / want.grad.abs().max().item()
    os.environ.pop("FLASH_ATTN_TRITON_ATOMIC_DQ")
    return errors


def opcheck_cases(kernel) -> dict:
    """torch.library.opcheck on the forward and backward ops (the backward op with the single pass too), on
    [B, H, S, D] inputs and on [B, S, H, D] views (outputs and gradients in that layout, which the fake
    implementations must say): schema, fake tensors, autograd registration and AOT dispatch; "ok" or the
    first line of what failed."""
    from torch.library import opcheck

    results = {}
    for layout in ("", "_bshd"):
        q, k, v = inputs(1, 2, 1, 24, 24, 64, seed=6)
        if layout:
            q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        out, lse = kernel._ops.attention_fwd(q, k, v, True, 0.125, 0, False)
        bwd_args = (torch.randn_like(out), q.detach(), k.detach(), v.detach(), out.detach(), lse.detach(), True,
                    0.125, 0, False)
        calls = {"fwd": (kernel._ops.attention_fwd, (q, k, v, True, 0.125, 0, False)),
                 "bwd": (kernel._ops.attention_bwd, bwd_args), "bwd_single_pass": (kernel._ops.attention_bwd, bwd_args)}
        for name, (op, args) in calls.items():
            os.environ["FLASH_ATTN_TRITON_ATOMIC_DQ"] = "1" if name == "bwd_single_pass" else "0"
            try:
                opcheck(op, args)
                results[name + layout] = "ok"
            except Exception as e:  # reported, asserted on by the test
                results[name + layout] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    os.environ.pop("FLASH_ATTN_TRITON_ATOMIC_DQ")
    return results


def compiled_case(kernel) -> float:
    """torch.compile(fullgraph=True) of a module calling attention(), forward and backward, against eager
    (the aot_eager backend: CPU CI has no inductor toolchain to rely on; tests/triton_kernel/test_kernel_on_gpu.py
    compiles with inductor on a GPU). Any graph break raises under fullgraph=True."""
    class Block(torch.nn.Module):
        def forward(self, q, k, v):
            return kernel.attention(q * 1.5, k, v, causal=True).float().square().sum()

    q, k, v = inputs(1, 2, 2, 24, 24, 64, seed=7)
    grads = []
    for module in (Block(), torch.compile(Block(), fullgraph=True, backend="aot_eager")):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        module(*leaves).backward()
        grads.append([t.grad for t in leaves])
    return max(max_error(a, b.double()) for a, b in zip(*grads, strict=True))


if __name__ == "__main__":
    module = import_from_folder()
    print(json.dumps({"forward": forward_cases(module), "loop_forms": loop_form_cases(module),
                      "head_groups": head_group_case(module), "flash_attn_func": flash_attn_func_case(module),
                      "layouts": layout_cases(module),
                      "flash_attn_func_gradients": flash_attn_func_gradient_case(module),
                      "gradients": gradient_cases(module), "opcheck": opcheck_cases(module),
                      "compiled": compiled_case(module)}))
