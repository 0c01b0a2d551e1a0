"""The masked backward (windows, causal either way, documents, packed batches): the tiles its two passes
walk against the mask's definition, and its gradients against float64, under Triton's interpreter; on a
GPU, bf16 gradients against float64 beside SDPA's error on the same dense mask."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from mask_reference import keep_mask, reference  # noqa: E402

from attnprof.kernels import import_from_folder  # noqa: E402
from support import run_interpreted  # noqa: E402

CASES = Path(__file__).with_name("interpreted_masked_backward.py")
GRADIENT_TOLERANCE = 2e-3  # float16 operands, relative to each gradient's largest element: measured 2e-4 to 6e-4


def test_both_passes_walk_exactly_the_tiles_the_mask_leaves_and_mask_only_the_edges():
    ranges = run_interpreted(CASES, "ranges")["ranges"]
    assert len(ranges) == 84
    for case, checks in ranges.items():
        assert all(checks.values()), (case, checks)


@pytest.mark.slow
def test_masked_gradients_match_float64_for_every_mask_kind():
    gradients = run_interpreted(CASES, "gradients")["gradients"]
    assert len(gradients) == 10  # "packed qkv varlen" also counts the inputs copied (0.0: all read in place)
    for case, errors in gradients.items():
        assert max(errors.values()) < GRADIENT_TOLERANCE, (case, errors)


@pytest.mark.slow
def test_the_single_pass_gradients_match_float64_for_every_mask_kind():
    """FLASH_ATTN_TRITON_ATOMIC_DQ=1: the same cases through the masked backward as one pass (atomic dQ)."""
    gradients = run_interpreted(CASES, "single_pass_gradients")["single_pass_gradients"]
    assert len(gradients) == 10
    for case, errors in gradients.items():
        assert max(errors.values()) < GRADIENT_TOLERANCE, (case, errors)


def _bf16_leaves(*shapes, gen):
    return [torch.randn(*shape, generator=gen).to(torch.bfloat16).cuda().requires_grad_() for shape in shapes]


@pytest.mark.cuda
@pytest.mark.parametrize("bottom_right", [True, False])
def test_on_the_gpu_masked_gradients_are_no_worse_than_sdpa_with_the_dense_mask(bottom_right):
    """Two sequences of 200 and 500 queries against 300 and 700 keys, causal with a window of 256, GQA 8/2,
    D128, bf16: each gradient's error relative to its largest element, against float64."""
    kernel = import_from_folder()
    gen = torch.Generator().manual_seed(26)
    q, k, v = _bf16_leaves((1, 8, 700, 128), (1, 2, 1000, 128), (1, 2, 1000, 128), gen=gen)
    weight = torch.randn(1, 8, 700, 128, generator=gen).cuda()
    keep = torch.zeros(700, 1000, dtype=torch.bool)
    for (qs, qe), (ks, ke) in (((0, 200), (0, 300)), ((200, 700), (300, 1000))):
        off = (ke - ks) - (qe - qs) if bottom_right else 0
        keep[qs:qe, ks:ke] = keep_mask(qe - qs, ke - ks, True, (255, -1), off)
    f64 = [t.detach().cpu().double().requires_grad_() for t in (q, k, v)]
    (reference(*(t[0].transpose(0, 1) for t in f64), keep)[0].transpose(0, 1)[None] * weight.cpu()).sum().backward()
    cu_q, cu_k = (torch.tensor(c, dtype=torch.int32, device="cuda") for c in ([0, 200, 700], [0, 300, 1000]))
    function = kernel.backward.masked_backward.MaskedAttentionFunction
    out = function.apply(q, k, v, cu_q, cu_k, 500, 700, 128 ** -0.5, (255, 0), bottom_right, "bhsd")[0]
    _assert_no_worse_than_sdpa(out, (q, k, v), weight, keep, f64)


def _assert_no_worse_than_sdpa(out, leaves, weight, keep, f64) -> None:
    """Each of out's gradients (of (out * weight).sum()) against f64's, relative to its largest element: within
    twice SDPA's error with the dense mask keep, plus 1e-3."""
    ours = torch.autograd.grad((out.float() * weight).sum(), leaves)
    sdpa_out = torch.nn.functional.scaled_dot_product_attention(*leaves, attn_mask=keep.cuda(), enable_gqa=True)
    sdpa = torch.autograd.grad((sdpa_out.float() * weight).sum(), leaves)
    for name, got, base, want in zip(("dq", "dk", "dv"), ours, sdpa, f64, strict=True):
        scale = want.grad.abs().max().item()
        error = (got.cpu().double() - want.grad).abs().max().item() / scale
        sdpa_error = (base.cpu().double() - want.grad).abs().max().item() / scale
        assert error <= 2 * sdpa_error + 1e-3, (name, error, sdpa_error)


@pytest.mark.cuda
@pytest.mark.parametrize("causal, window", [(True, (255, -1)), (False, (100, 37))])
def test_on_the_gpu_a_window_over_one_sequence_takes_the_gluon_backward_no_worse_than_sdpa(causal, window):
    """One sequence of 1024 tokens, GQA 8/2, D128, bf16, [B, H, S, D] contiguous: on sm_90 the warp-specialised
    Gluon backward (each key block walks the query blocks its band reaches, both edges masked), elsewhere the
    Triton passes; gradients against float64 beside SDPA's with the dense mask."""
    kernel = import_from_folder()
    hopper = torch.cuda.get_device_capability() == (9, 0)
    gen = torch.Generator().manual_seed(261)
    q, k, v = _bf16_leaves((1, 8, 1024, 128), (1, 2, 1024, 128), (1, 2, 1024, 128), gen=gen)
    weight = torch.randn(1, 8, 1024, 128, generator=gen).cuda()
    f64 = [t.detach().cpu().double().requires_grad_() for t in (q, k, v)]
    keep = keep_mask(1024, 1024, causal, window, 0)
    (reference(*(t[0].transpose(0, 1) for t in f64), keep)[0].transpose(0, 1)[None] * weight.cpu()).sum().backward()
    gluon_plans = len(kernel.backward._backward_hopper_launch._PLANS)
    out = kernel.masked_attention(q, k, v, causal=causal, window_size=window)
    _assert_no_worse_than_sdpa(out, (q, k, v), weight, keep, f64)
    assert len(kernel.backward._backward_hopper_launch._PLANS) == gluon_plans + hopper
