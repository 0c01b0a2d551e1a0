"""Head dim 256 and q/k 192 with v 128 (DeepSeek's MLA prefill) in the plain kernels: forward and backward under
the interpreter against float64 (interpreted_head_dims.py), the Gluon kernels never chosen for them, and on the
GPU in bfloat16 against float64, each within twice the error of PyTorch's own bfloat16 attention."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from mask_reference import keep_mask, reference  # noqa: E402

from attnprof.kernels import import_from_folder  # noqa: E402
from support import run_interpreted  # noqa: E402

CASES = Path(__file__).with_name("interpreted_head_dims.py")
RELATIVE = 5e-3  # float16 rounding of P and dS: ~6e-4 of the largest element at these shapes


def _assert_close(results: dict, count: int, gradients: bool) -> None:
    assert len(results) == count
    for case, errors in results.items():
        qk, v_dim = (int(d) for d in case.split()[0][1:].split("/"))
        assert errors["shapes"][0][-1] == v_dim, case  # the output has v's head dim
        if gradients:
            assert [shape[-1] for shape in errors["shapes"][1:]] == [qk, qk, v_dim], case
        for name in ("out", "dq", "dk", "dv") if gradients else ("out",):
            assert errors[name] < RELATIVE, (case, name)


@pytest.fixture(scope="module")
def interpreted() -> dict:
    """The three groups' results from one interpreted process (the script says why)."""
    return run_interpreted(CASES, "dense", "masked", "decode")


@pytest.mark.parametrize("group, count, gradients", [("dense", 6, True), ("masked", 8, True), ("decode", 4, False)])
def test_head_dims_256_and_192_128_match_float64_under_the_interpreter(interpreted, group, count, gradients):
    """Dense causal and not (one in [B, S, H, D] memory), window and packed sequences (each also through the atomic
    single pass), decode
    with one split and three; dense also with an inf in the next head's k (checked below)."""
    results = dict(interpreted[group])
    inf_case = results.pop("d192/128 inf in the next head's k", None)
    _assert_close(results, count, gradients)
    if group == "dense":  # a padded Q/K box over [B, S, H, D] memory reaches into the next head: nothing comes in
        assert inf_case["others_finite"] is False  # the inf is really there, in head 1's own rows
        assert inf_case["out"] < RELATIVE


@pytest.mark.parametrize("dims", [(96, 96), (192, 192), (256, 128), (128, 64), (192, 64), (32, 32)])
def test_other_head_dims_are_refused_naming_them(dims):
    qk, v_dim = dims
    q, k, v = torch.zeros(1, 2, 8, qk), torch.zeros(1, 2, 8, qk), torch.zeros(1, 2, 8, v_dim)
    with pytest.raises(ValueError, match=f"head_dim must be one of.*got q/k head_dim {qk}, v head_dim {v_dim}"):
        import_from_folder()._launch.check_inputs(*(t.half() for t in (q, k, v)))


@pytest.mark.parametrize("dims", [(64, 64), (128, 128), (256, 256), (192, 128)])
def test_the_supported_head_dims_pass_the_checks(dims):
    qk, v_dim = dims
    import_from_folder()._launch.check_inputs(*(torch.zeros(1, 2, 8, d).half() for d in (qk, qk, v_dim)))


@pytest.mark.parametrize("qk", [256, 192])
def test_the_gluon_kernels_never_take_the_new_head_dims(qk):
    module = import_from_folder()
    q = torch.zeros(1, 2, 1024, qk).half()
    assert "head dims 64 and 128 only" in module.forward._hopper_launch.unsupported(q, q, False, 0)
    assert "head dims 64 and 128 only" in module.backward._backward_hopper_launch.unsupported(q, q, False, 0)
    assert not module.backward.masked_backward.gluon_takes((q,) * 5, 1, 1024, 1024, ("test", qk))


@pytest.mark.parametrize("qk", [192, 256])
def test_the_autotuner_keeps_the_shipped_configuration_and_only_those_that_fit_the_wide_heads(qk):
    launch = import_from_folder()._launch
    kept = launch.prune_configs(launch.candidate_configs(), {"SK": 4096}, HEAD_DIM=256, HEAD_DIM_QK=qk)
    assert str(launch.SM90_CONFIGS[qk]) in map(str, kept)
    assert all(qk in launch.head_dims_of(c) for c in kept) and len(kept) < len(launch.candidate_configs())


def _bf16(*shapes, gen):
    return [torch.randn(*shape, generator=gen).to(torch.bfloat16).cuda().requires_grad_() for shape in shapes]


def _check_against_float64(ours, peer, want, leaves: list, weight) -> None:
    """Output and gradients (of sum(out * weight)) of ours within twice the peer's (SDPA in bf16) error against
    float64, relative to the largest element, with 1e-3 of slack for the last bits."""
    f64 = [t.detach().double().requires_grad_() for t in leaves]
    reference_out = want(f64)
    wants = (reference_out.detach(), *torch.autograd.grad((reference_out * weight.double()).sum(), f64))
    got = (ours, *torch.autograd.grad((ours.float() * weight).sum(), leaves))
    peers = (peer, *torch.autograd.grad((peer.float() * weight).sum(), leaves))
    for name, mine, theirs, ref in zip(("out", "dq", "dk", "dv"), got, peers, wants, strict=True):
        scale = ref.abs().max().item()
        ours_error = (mine.double() - ref).abs().max().item() / scale
        peer_error = (theirs.double() - ref).abs().max().item() / scale
        assert ours_error <= 2 * peer_error + 1e-3, (name, ours_error, peer_error)


@pytest.mark.cuda
@pytest.mark.parametrize("qk, v_dim, single", [(256, 256, False), (192, 128, False), (256, 256, True),
                                               (192, 128, True)])
@pytest.mark.parametrize("causal", [False, True])
def test_on_the_gpu_dense_forward_and_backward_match_float64(qk, v_dim, single, causal, monkeypatch):
    """B2 H8/2 S1000 in [B, S, H, D] memory (flash-attn's layout: the padded tile's neighbour columns are real);
    single: the atomic single pass (FLASH_ATTN_TRITON_ATOMIC_DQ=1, TMA reduces of dQ on sm_90), else the two-pass
    backward."""
    monkeypatch.setenv("FLASH_ATTN_TRITON_ATOMIC_DQ", "1" if single else "0")
    sdpa = torch.nn.functional.scaled_dot_product_attention
    gen = torch.Generator().manual_seed(31)
    q, k, v = _bf16((2, 1000, 8, qk), (2, 1000, 2, qk), (2, 1000, 2, v_dim), gen=gen)
    views = [t.transpose(1, 2) for t in (q, k, v)]
    weight = torch.randn(2, 8, 1000, v_dim, generator=gen).cuda()
    ours = import_from_folder().attention(*views, causal=causal)
    peer = sdpa(*views, is_causal=causal, enable_gqa=True)
    _check_against_float64(ours, peer, lambda f: sdpa(*f, is_causal=causal, enable_gqa=True), views, weight)


@pytest.mark.cuda
@pytest.mark.parametrize("qk, v_dim", [(256, 256), (192, 128)])
@pytest.mark.parametrize("single", [False, True])
def test_on_the_gpu_window_and_packed_sequences_match_float64(qk, v_dim, single, monkeypatch):
    """flash_attn_varlen_func, causal with a window of 300, over sequences of 1000 and 700 tokens (GQA 8/2);
    single: the masked backward as one pass (FLASH_ATTN_TRITON_ATOMIC_DQ=1, dQ by TMA reduces on sm_90)."""
    monkeypatch.setenv("FLASH_ATTN_TRITON_ATOMIC_DQ", "1" if single else "0")
    sdpa = torch.nn.functional.scaled_dot_product_attention
    gen = torch.Generator().manual_seed(32)
    q, k, v = _bf16((1700, 8, qk), (1700, 2, qk), (1700, 2, v_dim), gen=gen)
    cu = torch.tensor([0, 1000, 1700], dtype=torch.int32, device="cuda")
    weight = torch.randn(1700, 8, v_dim, generator=gen).cuda()
    ours = import_from_folder().flash_attn_varlen_func(q, k, v, cu, cu, 1000, 1000, causal=True, window_size=(300, 0))
    bounds = ((0, 1000), (1000, 1700))

    def each_sequence(t, f):  # the sequences one by one through f, [S, H, D] in and out
        return torch.cat([f(*(x[a:b].transpose(0, 1) for x in t), keep=keep_mask(b - a, b - a, True, (300, 0), 0)
                            .cuda()).transpose(0, 1) for a, b in bounds])

    peer = each_sequence((q, k, v), lambda *t, keep: sdpa(*t, attn_mask=keep, enable_gqa=True))
    _check_against_float64(ours, peer, lambda f: torch.cat([reference(*(x[a:b] for x in f), keep_mask(
        b - a, b - a, True, (300, 0), 0))[0] for a, b in bounds]), [q, k, v], weight)


@pytest.mark.cuda
@pytest.mark.parametrize("qk, v_dim", [(256, 256), (192, 128)])
def test_on_the_gpu_decode_matches_float64_with_and_without_splits(qk, v_dim):
    module = import_from_folder()
    gen = torch.Generator().manual_seed(33)
    q = torch.randn(2, 1, 32, qk, generator=gen).to(torch.bfloat16).cuda()
    k_cache = torch.randn(2, 3000, 8, qk, generator=gen).to(torch.bfloat16).cuda()
    v_cache = torch.randn(2, 3000, 8, v_dim, generator=gen).to(torch.bfloat16).cuda()
    lens = torch.tensor([3000, 500], dtype=torch.int32, device="cuda")
    for splits in (0, 1, 5):
        out = module.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, num_splits=splits)
        assert out.shape[-1] == v_dim
        for b, n in enumerate(lens.tolist()):
            want = reference(*(t[b, :m].cpu() for t, m in ((q, 1), (k_cache, n), (v_cache, n))),
                             keep_mask(1, n, False, (-1, -1), n - 1))[0]
            # the existing decode test's bound (test_softcap_sinks): bf16 inputs, outputs of magnitude ~0.1-1
            assert (out[b].cpu().double() - want).abs().max().item() < 3e-2, (splits, b)


def test_no_key_at_all_gives_zeros_of_v_head_dim():
    q, k, v = torch.zeros(1, 2, 4, 192).half(), torch.zeros(1, 2, 0, 192).half(), torch.zeros(1, 2, 0, 128).half()
    out = import_from_folder().attention(q, k, v)
    assert out.shape == (1, 2, 4, 128) and not out.any()
