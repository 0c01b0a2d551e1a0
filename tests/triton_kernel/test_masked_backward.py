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
    ranges = run_interpreted(CASES, "ranges")
    assert len(ranges) == 84
    for case, checks in ranges.items():
        assert all(checks.values()), (case, checks)


@pytest.mark.slow
def test_masked_gradients_match_float64_for_every_mask_kind():
    gradients = run_interpreted(CASES)
    assert len(gradients) == 10  # "packed qkv varlen" also counts the inputs copied (0.0: all read in place)
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
    out = kernel.masked_backward.MaskedAttentionFunction.apply(q, k, v, cu_q, cu_k, 500, 700, 128 ** -0.5, (255, 0),
                                                               bottom_right, "bhsd")[0]
    ours = torch.autograd.grad((out.float() * weight).sum(), (q, k, v))
    sdpa_out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep.cuda(), enable_gqa=True)
    sdpa = torch.autograd.grad((sdpa_out.float() * weight).sum(), (q, k, v))
    for name, got, base, want in zip(("dq", "dk", "dv"), ours, sdpa, f64, strict=True):
        scale = want.grad.abs().max().item()
        error = (got.cpu().double() - want.grad).abs().max().item() / scale
        sdpa_error = (base.cpu().double() - want.grad).abs().max().item() / scale
        assert error <= 2 * sdpa_error + 1e-3, (name, error, sdpa_error)
