"""Issue 44's hostile calls: each refused with a ValueError naming the argument before anything launches (the
launches are replaced by a stub that records them), and no key at all answered with SDPA's zeros."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnprof.kernels import import_from_folder  # noqa: E402


@pytest.fixture
def launches(monkeypatch) -> list:
    """The masked forward's and the decode's launches, stubbed: what reaches them is recorded, not run."""
    flash_api = import_from_folder().flash_api
    calls: list = []

    def stub(q, *args, **kwargs):
        calls.append(args)
        return torch.zeros_like(q), None

    monkeypatch.setattr(flash_api, "masked_attention_call", stub)
    monkeypatch.setattr(flash_api, "decode", stub)
    return calls


def _cu(*offsets):
    return torch.tensor(offsets, dtype=torch.int32)


def _packed(tokens=16):
    return tuple(torch.randn(tokens, 2, 64).half() for _ in range(3))


@pytest.mark.parametrize("cu, max_seqlen, message", [
    (_cu(0, 64), 64, "cu_seqlens_q must end at the 16 tokens q holds; it ends at 64"),
    (_cu(-8, 16), 16, "cu_seqlens_q must start at 0 and never decrease"),
    (_cu(4, 16), 16, "cu_seqlens_q must start at 0"),
    (_cu(0, 10, 4, 16), 16, "never decrease; got first 0, a step of -6"),
    (_cu(0, 16), 0, "max_seqlen_q must be a positive int; got 0"),
    (_cu(0, 16), -3, "max_seqlen_q must be a positive int"),
    (_cu(0, 16), 8, r"max_seqlen_q \(8\) is below the longest sequence \(16\)"),
    (_cu(0, 16), 16.0, "max_seqlen_q must be an int; got float"),
    (_cu(0), 16, "at least one sequence"),
])
def test_varlen_metadata_that_would_read_out_of_bounds_is_refused_before_a_launch(launches, cu, max_seqlen, message):
    with pytest.raises(ValueError, match=message):
        import_from_folder().flash_attn_varlen_func(*_packed(), cu, cu, max_seqlen, max_seqlen)
    assert launches == []


def test_varlen_values_are_checked_once_per_tensor_version_and_again_after_an_in_place_change(launches, monkeypatch):
    module = import_from_folder()
    reads = []
    real_bounds = module._arguments._bounds
    monkeypatch.setattr(module._arguments, "_bounds", lambda cu: reads.append(cu) or real_bounds(cu))
    cu = _cu(0, 5, 16)
    for _ in range(3):  # one tensor passed to every layer of a step: read once
        module.flash_attn_varlen_func(*_packed(), cu, cu, 11, 11)
    assert len(launches) == 3 and len(reads) == 2  # q's and k's offsets, read in one synchronisation
    cu[1] = 17  # changed in place: its version moved, so it is read again and refused
    with pytest.raises(ValueError, match="never decrease"):
        module.flash_attn_varlen_func(*_packed(), cu, cu, 11, 11)
    module.flash_attn_varlen_func(*_packed(), cu, cu, 11, 11, validate=False)  # the caller vouches: no read
    assert len(launches) == 4 and len(reads) == 4


def _cache():
    return torch.randn(2, 1, 2, 64).half(), torch.randn(2, 16, 2, 64).half(), torch.randn(2, 16, 2, 64).half()


@pytest.mark.parametrize("cache_seqlens, new, message", [
    (1000, 0, r"cache_seqlens must lie in 0\.\.16 .* got 1000"),
    (-3, 0, r"cache_seqlens must lie in 0\.\.16 .* got -3"),
    (_cu(-3, 4), 0, r"0\.\.16 .* got -3\.\.4"),
    (_cu(4, 17), 0, r"0\.\.16 .* got 4\.\.17"),
    (_cu(4, 15), 2, r"0\.\.14 .* got 4\.\.15"),  # the two appended keys would land past the last slot
    (3.0, 0, "cache_seqlens must be an int"),
    (None, 17, "17 new keys do not fit a cache of 16 slots"),
])
def test_cache_lengths_outside_the_cache_are_refused_before_anything_is_written(launches, cache_seqlens, new, message):
    q, k_cache, v_cache = _cache()
    before = k_cache.clone()
    new_kv = (torch.randn(2, new, 2, 64).half(),) * 2 if new else (None, None)
    with pytest.raises(ValueError, match=message):
        import_from_folder().flash_attn_with_kvcache(q, k_cache, v_cache, *new_kv, cache_seqlens=cache_seqlens)
    assert launches == [] and torch.equal(k_cache, before)


def _bhsd(seq=16):
    return tuple(torch.randn(1, 2, seq, 64).half() for _ in range(3))


@pytest.mark.parametrize("keywords, message", [
    ({"document_len": 0}, "document_len must be a positive int; got 0"),
    ({"document_len": -4}, "document_len must be a positive int; got -4"),
    ({"document_len": 4.0}, "document_len must be an int; got float"),
    ({"window_size": (-5, 3)}, "window_size's entries must be >= 0, or -1 for no limit; got \\(-5, 3\\)"),
    ({"window_size": (2.5, 0)}, "window_size's entries must be an int; got float 2.5"),
    ({"window_size": (0,)}, r"window_size must be \(left, right\); got \(0,\)"),
    ({"window_size": (1, 2, 3)}, r"window_size must be \(left, right\)"),
    ({"window_size": (True, 0)}, "window_size's entries must be an int; got bool"),
    ({"sm_scale": True}, "sm_scale must be a real number; got bool True"),
    ({"sm_scale": float("nan")}, "sm_scale must be positive and finite"),
])
def test_masked_attention_refuses_bad_masks_and_scales(launches, keywords, message):
    with pytest.raises(ValueError, match=message):
        import_from_folder().masked_attention(*_bhsd(), **keywords)
    assert launches == []


@pytest.mark.parametrize("call, keywords, message", [
    ("flash_attn_func", {"window_size": (-5, 3)}, "window_size's entries must be >= 0"),
    ("flash_attn_func", {"window_size": (-1.0, -1.0)}, "window_size's entries must be an int"),
    ("flash_attn_func", {"softmax_scale": True}, "softmax_scale must be a real number; got bool"),
    ("attention", {"sm_scale": True}, "sm_scale must be a real number; got bool"),
    ("attention", {"sm_scale": "0.1"}, "sm_scale must be a real number; got str"),
])
def test_the_dense_calls_refuse_bad_windows_and_scales(call, keywords, message):
    with pytest.raises(ValueError, match=message):
        getattr(import_from_folder(), call)(*_bhsd(), **keywords)


@pytest.mark.parametrize("causal", [False, True])
def test_no_key_at_all_gives_sdpa_zeros_and_zero_gradients(causal):
    module = import_from_folder()
    q = torch.randn(1, 2, 5, 64).half().requires_grad_()
    k, v = (torch.randn(1, 2, 0, 64).half().requires_grad_() for _ in range(2))
    want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
    for out in (module.attention(q, k, v, causal=causal),
                module.flash_attn_func(*(t.transpose(1, 2) for t in (q, k, v)), causal=causal).transpose(1, 2),
                module.masked_attention(q, k, v, causal=causal, window_size=(2, 0))):
        assert out.shape == q.shape and torch.equal(out.float(), want)
    out.sum().backward()
    assert torch.equal(q.grad, torch.zeros_like(q)) and k.grad.shape == k.shape


@pytest.mark.parametrize("table, pages, page_size, message", [
    (torch.tensor([[0, 5]], dtype=torch.int32), 4, 64, r"block_table's entries must be pages 0\.\.3; got 0\.\.5"),
    (torch.tensor([[-1, 2]], dtype=torch.int32), 4, 64, r"pages 0\.\.3; got -1\.\.2"),
    (torch.tensor([[0, 1]], dtype=torch.int64), 4, 64, "block_table must be an int32 tensor"),
    (torch.tensor([0, 1], dtype=torch.int32), 4, 64, "block_table must be an int32 tensor"),
    (torch.tensor([[0, 1]], dtype=torch.int32), 4, 48, "page_size a multiple of 64"),
])
def test_a_block_table_outside_the_pages_is_refused_before_a_launch(launches, table, pages, page_size, message):
    q = torch.randn(1, 1, 2, 64).half()
    k_pages = torch.randn(pages, page_size, 2, 64).half()
    with pytest.raises(ValueError, match=message):
        import_from_folder().flash_attn_with_kvcache(q, k_pages, k_pages.clone(), cache_seqlens=3, block_table=table)
    assert launches == []


def test_cache_lengths_are_bounded_by_the_pages_a_sequence_has(launches):
    q, k_pages = torch.randn(1, 1, 2, 64).half(), torch.randn(4, 64, 2, 64).half()
    table = torch.tensor([[2, 0]], dtype=torch.int32)  # 128 slots
    with pytest.raises(ValueError, match=r"cache_seqlens must lie in 0\.\.128"):
        import_from_folder().flash_attn_with_kvcache(q, k_pages, k_pages.clone(), cache_seqlens=129, block_table=table)
    import_from_folder().flash_attn_with_kvcache(q, k_pages, k_pages.clone(), cache_seqlens=128, block_table=table)
    assert len(launches) == 1



def test_no_key_at_all_with_a_sink_gives_zeros_and_the_sink_as_lse():
    q, keys = torch.randn(1, 4, 5, 64).half(), torch.randn(1, 2, 0, 64).half()
    sink = torch.randn(4)
    out, lse = import_from_folder().masked_attention(q, keys, keys, learnable_sink=sink, return_lse=True)
    assert torch.equal(out, torch.zeros_like(q)) and torch.equal(lse[0], sink[:, None].expand(4, 5))
