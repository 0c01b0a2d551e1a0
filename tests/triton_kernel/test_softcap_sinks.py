"""Logit soft-capping (Gemma-2) and learnable attention sinks (gpt-oss) in the masked kernel, forward and
backward (the sink's gradient too): under the interpreter against float64 and flex_attention's score_mod, and
on the GPU against flex_attention (forward and backward) and gpt-oss's eager reference."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from mask_reference import keep_mask, reference  # noqa: E402

from attnprof.kernels import import_from_folder  # noqa: E402
from support import FP16_TOLERANCE, run_interpreted  # noqa: E402

CASES = Path(__file__).with_name("interpreted_softcap_sinks.py")
RELATIVE = 5e-3  # float16 rounding of P and dS: ~4e-4 of the largest element at these shapes


@pytest.fixture(scope="module")
def interpreted() -> dict:
    return run_interpreted(CASES)


@pytest.mark.slow  # one interpreter process for the four (~17 s of CPU)
def test_softcap_and_sinks_forward_and_backward_match_float64(interpreted):
    assert len(interpreted["dense"]) == 4
    for case, errors in interpreted["dense"].items():
        assert set(errors) >= {"out", "dq", "dk", "dv"}, case
        assert ("dsink" in errors) == ("sink=True" in case), case
        for name, error in errors.items():
            assert error < RELATIVE, (case, name)


@pytest.mark.slow  # one interpreter process for the four (~17 s of CPU)
def test_the_single_pass_with_softcap_and_a_sink_matches_float64(interpreted):
    """FLASH_ATTN_TRITON_ATOMIC_DQ=1: the masked backward as one pass, dQ added by float32 atomics."""
    errors = interpreted["dense_single_pass"]
    assert set(errors) == {"out", "dq", "dk", "dv", "dsink"}
    for name, error in errors.items():
        assert error < RELATIVE, name


@pytest.mark.slow  # one interpreter process for the four (~17 s of CPU)
def test_softcap_matches_flex_attention_with_gemma2_score_mod(interpreted):
    flex = interpreted["flex"]
    assert flex["reference_vs_flex"] < 1e-12  # our float64 reference is flex's formula
    assert flex["ours_vs_flex"] < RELATIVE
    assert flex["uncapped_vs_flex"] > 10 * RELATIVE  # the cap changes the answer: a kernel ignoring it fails


@pytest.mark.slow  # one interpreter process for the four (~17 s of CPU)
def test_packed_sequences_with_softcap_sinks_and_a_window_match_float64(interpreted):
    assert interpreted["varlen"] < RELATIVE


@pytest.mark.slow  # one interpreter process for the four (~17 s of CPU)
def test_decode_with_softcap_and_sinks_matches_float64_with_and_without_splits(interpreted):
    assert len(interpreted["decode"]) == 4
    for case, error in interpreted["decode"].items():
        assert error < FP16_TOLERANCE, case


@pytest.mark.parametrize("keywords, message", [
    ({"softcap": -1.0}, "softcap must be >= 0"),
    ({"softcap": float("inf")}, "softcap must be >= 0 and finite"),
    ({"softcap": True}, "softcap must be a real number"),
    ({"learnable_sink": torch.zeros(3)}, r"learnable_sink must be a float tensor of shape \(4,\)"),
    ({"learnable_sink": torch.zeros(4, dtype=torch.int32)}, "learnable_sink must be a float tensor"),
])
def test_bad_softcaps_and_sinks_are_refused(keywords, message):
    q = torch.zeros(1, 4, 8, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match=message):
        import_from_folder().masked_attention(q, q, q, **keywords)


def _bf16_leaves(*shapes, gen):
    return [torch.randn(*shape, generator=gen).to(torch.bfloat16).cuda().requires_grad_() for shape in shapes]


def _grads(out, leaves, weight):
    return torch.autograd.grad((out.float() * weight).sum(), leaves)


@pytest.mark.cuda
def test_on_the_gpu_softcap_forward_and_backward_match_flex_attention():
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    cap = 30.0
    gen = torch.Generator().manual_seed(11)
    q, k, v = _bf16_leaves((2, 8, 1000, 128), (2, 8, 1000, 128), (2, 8, 1000, 128), gen=gen)
    for t in (q, k):  # Gemma-2-sized logits, where the cap bends them
        t.data.mul_(3)
    weight = torch.randn(2, 8, 1000, 128, generator=gen).cuda()
    mask = create_block_mask(lambda b, h, qi, ki: ki <= qi, None, None, 1000, 1000)
    flex = torch.compile(flex_attention)(q, k, v, block_mask=mask,
                                         score_mod=lambda s, b, h, qi, ki: cap * torch.tanh(s / cap))
    ours = import_from_folder().masked_attention(q, k, v, causal=True, softcap=cap)
    f64 = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want = torch.stack([reference(*(t[b].transpose(0, 1) for t in f64), keep_mask(1000, 1000, True, (-1, -1), 0),
                                  cap)[0].transpose(0, 1) for b in range(2)])
    wants = torch.autograd.grad((want * weight.double()).sum(), f64)
    for got, flexed, ref in zip((ours, *_grads(ours, (q, k, v), weight)), (flex, *_grads(flex, (q, k, v), weight)),
                                (want.detach(), *wants), strict=True):
        scale = ref.abs().max().item()
        ours_error = (got.double() - ref).abs().max().item() / scale
        flex_error = (flexed.double() - ref).abs().max().item() / scale
        assert ours_error <= 2 * flex_error + 1e-3, (ours_error, flex_error)


@pytest.mark.cuda
def test_on_the_gpu_sinks_forward_and_backward_match_gpt_oss_reference():
    gen = torch.Generator().manual_seed(12)
    q, k, v = _bf16_leaves((1, 1100, 16, 64), (1, 1100, 2, 64), (1, 1100, 2, 64), gen=gen)
    sink = torch.randn(16, generator=gen).cuda().requires_grad_()
    weight = torch.randn(1, 1100, 16, 64, generator=gen).cuda()
    ours = import_from_folder().flash_attn_func(q, k, v, causal=True, window_size=(127, 0), learnable_sink=sink)
    got = (ours, *_grads(ours, (q, k, v, sink), weight))
    f64 = [t.detach().double().requires_grad_() for t in (q, k, v, sink)]
    want = reference(*(t[0] for t in f64[:3]), keep_mask(1100, 1100, True, (127, 0), 0), 0.0, f64[3])[0][None]
    wants = (want.detach(), *torch.autograd.grad((want * weight.double()).sum(), f64))
    for name, mine, ref in zip(("out", "dq", "dk", "dv", "dsink"), got, wants, strict=True):
        assert (mine.double() - ref).abs().max().item() / ref.abs().max().item() < 2e-2, name


@pytest.mark.cuda
def test_on_the_gpu_decode_with_softcap_and_sinks_matches_float64():
    module = import_from_folder()
    gen = torch.Generator().manual_seed(13)
    q = torch.randn(2, 1, 32, 128, generator=gen).to(torch.bfloat16).cuda()
    k_cache, v_cache = (torch.randn(2, 3000, 8, 128, generator=gen).to(torch.bfloat16).cuda() for _ in range(2))
    lens = torch.tensor([3000, 500], dtype=torch.int32, device="cuda")
    sink = torch.randn(32, generator=gen).cuda()
    for splits in (0, 1, 5):
        out = module.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, softcap=30.0,
                                             learnable_sink=sink, num_splits=splits)
        for b, n in enumerate(lens.tolist()):
            want = reference(*(t[b, :m].cpu() for t, m in ((q, 1), (k_cache, n), (v_cache, n))),
                             keep_mask(1, n, False, (-1, -1), n - 1), 30.0, sink.cpu())[0]
            assert (out[b].cpu().double() - want).abs().max().item() < 3e-2, (splits, b)
