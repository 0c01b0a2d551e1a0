"""The two-pass backward on the caller's layouts: q, k, v, the output and dO read where they lie, gradients
in the inputs' layout, against float64 (CPU: the interpreter, interpreted_backward_layouts.py; GPU: bf16
next to cuDNN's error)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnprof.kernels import import_from_folder  # noqa: E402
from support import run_interpreted  # noqa: E402

CASES = Path(__file__).with_name("interpreted_backward_layouts.py")
GRADIENT_TOLERANCE = 2e-3  # float16 operands, relative to each gradient's largest element: measured 3e-4 to 6e-4


@pytest.fixture(scope="module")
def interpreted() -> dict:
    return run_interpreted(CASES)


@pytest.mark.slow
def test_gradients_on_bhsd_bshd_packed_qkv_and_mixed_match_float64_with_gqa_both_head_dims_and_masks(interpreted):
    assert len(interpreted) == 14
    for case, result in interpreted.items():
        assert result["max_relative_error"] < GRADIENT_TOLERANCE, case


@pytest.mark.slow
def test_the_passes_read_every_readable_input_in_place_and_write_gradients_in_the_inputs_layout(interpreted):
    for case, result in interpreted.items():
        expanded = case == "copied:expanded_dout"  # out.sum()'s dO has stride 0 everywhere: it alone is copied
        assert result["read_in_place"] == {"Q": True, "K": True, "V": True, "dO": not expanded}, case
        assert result["out_read_in_place"], case
        assert result["grads_in_inputs_layout"] == [True, True, True], case


def _gpu_leaves(layout: str, gen):
    """bf16 leaves on the GPU and the [B, H, S, D] views of them the kernel gets: S1024 D128 MHA, or a packed
    [B, S, 8 + 2 + 2, D64] projection (GQA 8/2)."""
    if layout == "packed_qkv_gqa":
        qkv = torch.randn(1, 512, 12, 64, generator=gen).bfloat16().cuda().requires_grad_()
        return [qkv], lambda ts: [ts[0][:, :, a:b].transpose(1, 2) for a, b in ((0, 8), (8, 10), (10, 12))]
    tensors = [torch.randn(2, 1024, 4, 128, generator=gen).bfloat16().cuda() for _ in range(3)]  # [B, S, H, D]
    if layout == "bhsd":
        tensors = [t.transpose(1, 2).contiguous() for t in tensors]
        return [t.requires_grad_() for t in tensors], lambda ts: ts
    return [t.requires_grad_() for t in tensors], lambda ts: [t.transpose(1, 2) for t in ts]


def _grads(attend, leaves, views_of, dout) -> tuple[list, list]:
    """(the views attend was called with, the gradients of fresh copies of the leaves)."""
    leaves = [t.detach().clone().requires_grad_() for t in leaves]
    views = views_of(leaves)
    attend(*views).backward(dout)
    return views, [t.grad for t in leaves]


@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layout", ["bhsd", "bshd", "packed_qkv_gqa"])
def test_on_the_gpu_gradients_on_each_layout_are_as_accurate_as_cudnns_and_read_in_place(monkeypatch, causal, layout):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    module = import_from_folder()
    gen = torch.Generator().manual_seed(6)
    leaves, views_of = _gpu_leaves(layout, gen)
    dout = torch.randn(views_of(leaves)[0].shape, generator=gen).bfloat16().cuda()
    backward = sys.modules[module.__name__ + ".backward._backward"]
    seen, run = [], backward.run_planned

    def recording(plans, key, launches, tensors):
        seen.append(tensors)
        run(plans, key, launches, tensors)

    monkeypatch.setattr(backward, "run_planned", recording)
    _, ours = _grads(lambda q, k, v: module.attention(q, k, v, causal=causal), leaves, views_of, dout)
    again_views, again = _grads(lambda q, k, v: module.attention(q, k, v, causal=causal), leaves, views_of, dout)
    assert all(torch.equal(a, b) for a, b in zip(ours, again, strict=True))  # the second call ran its plan
    for name, t in zip("QKV", again_views, strict=True):  # read where they lie
        assert seen[-1][name].data_ptr() == t.data_ptr() and seen[-1][name].stride() == t.stride(), name

    def sdpa(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

    _, want = _grads(sdpa, [t.double() for t in leaves], views_of, dout.double())
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        _, theirs = _grads(sdpa, leaves, views_of, dout)
    for got, ref, lib in zip(ours, want, theirs, strict=True):
        assert got.shape == ref.shape
        assert (got.double() - ref).abs().max() <= 1.5 * (lib.double() - ref).abs().max() + 1e-4
