"""attnprof's split-KV decode and masked forward (windows, causal either way, packed batches, documents)
against float64 under Triton's interpreter, and the flash-attn calls' refusals and split counts."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from mask_reference import keep_mask, reference  # noqa: E402

from attnprof.kernels import import_from_folder  # noqa: E402
from support import FP16_TOLERANCE, run_interpreted  # noqa: E402

CASES = Path(__file__).with_name("interpreted_masks_decode.py")


@pytest.fixture(scope="module")
def interpreted() -> dict:
    return run_interpreted(CASES)


def test_decode_over_ragged_caches_matches_float64_with_and_without_splits(interpreted):
    assert len(interpreted["decode"]) == 20
    for case, error in interpreted["decode"].items():
        assert error < FP16_TOLERANCE, case


def test_a_fused_combine_over_more_splits_than_one_load_takes_matches_float64(interpreted):
    assert interpreted["many_splits"] < FP16_TOLERANCE


def test_new_keys_are_appended_to_the_cache_and_attended_to(interpreted):
    assert interpreted["append"] < FP16_TOLERANCE


def test_a_paged_cache_reads_only_its_sequences_pages_and_matches_float64(interpreted):
    assert set(interpreted["paged"]) == {"splits=1-fused=None", "splits=3-fused=False", "splits=3-fused=True",
                                         "splits=3-fused=False-tma=False", "append"}
    for case, error in interpreted["paged"].items():
        assert error < FP16_TOLERANCE, case  # inf if a NaN row outside the sequences had been read in


def test_windows_either_alignment_and_unequal_lengths_match_float64(interpreted):
    assert len(interpreted["windows"]) == 7
    for case, error in interpreted["windows"].items():
        assert error < FP16_TOLERANCE, case


def test_packed_batches_and_documents_match_each_sequence_alone(interpreted):
    assert len(interpreted["varlen"]) == 4
    for case, error in interpreted["varlen"].items():
        assert error < FP16_TOLERANCE, case


@pytest.mark.parametrize("call, arguments, named", [
    ("flash_attn_with_kvcache", {"cache_leftpad": torch.zeros(1, dtype=torch.int32), "alibi_slopes": torch.ones(4)},
     "alibi_slopes, cache_leftpad"),
    ("flash_attn_with_kvcache", {"rotary_cos": torch.zeros(1)}, "rotary_cos"),
    ("flash_attn_varlen_func", {"dropout_p": 0.1}, "dropout_p"),
])
def test_flash_attn_arguments_it_does_not_implement_are_named_in_the_error(call, arguments, named):
    module = import_from_folder()
    q = torch.zeros(1, 4, 2, 64, dtype=torch.float16)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    positional = (q, q, q) if call == "flash_attn_with_kvcache" else (q[0], q[0], q[0], cu, cu, 4, 4)
    with pytest.raises(NotImplementedError, match=f"does not support {named}$"):
        getattr(module, call)(*positional, **arguments)


def test_splits_fill_the_sms_but_never_cut_a_sequence_below_the_minimum_split():
    decode = import_from_folder().decode
    assert decode.num_splits(units=64, max_keys=8192, programs=264, min_split_keys=256) == 4  # B8 x 8 KV heads
    assert decode.num_splits(units=64, max_keys=512, programs=264, min_split_keys=256) == 2  # no split under 256
    assert decode.num_splits(units=1024, max_keys=8192, programs=264, min_split_keys=256) == 1  # enough programs
    assert decode.num_splits(units=1, max_keys=1 << 20, programs=264, min_split_keys=128) == decode.MAX_SPLITS
    assert decode.num_splits(units=8, max_keys=2048, programs=264, min_split_keys=128) == 16


@pytest.mark.parametrize("batch, keys, splits", [(1, 2048, 16), (1, 4096, 16), (1, 8192, 32), (1, 32768, 33),
                                                  (2, 2048, 8), (8, 2048, 4), (8, 32768, 4)])
def test_on_the_h100_splits_get_256_keys_unless_shorter_ones_give_each_sm_one_program(batch, keys, splits):
    """The H100's b1 sweeps: 2k fastest at 16 splits of 128 keys (shorter than 256, to fill the 132 SMs once), 4k at
    16 of 256 (not 32 of 128, which two programs an SM would allow), 8k at 32 of 256; B8 as before (4 splits)."""
    decode = import_from_folder().decode
    card = decode.BY_CARD[decode._cards.H100]
    units = batch * 8  # 8 KV heads, q-len 1 with a GQA group of 4: one row block
    got = decode.num_splits(units, keys, 132 * decode.PROGRAMS_PER_SM, card.min_split_keys, card.fill_split_keys)
    assert got == splits


def test_a_device_takes_the_decode_settings_of_the_card_it_is_or_is_most_like():
    module = import_from_folder()
    cards, decode = sys.modules[f"{module.__name__}._cards"], module.decode
    table = tuple(decode.BY_CARD)
    assert cards.card_for("NVIDIA H100 80GB HBM3", (9, 0), 79.1, table) == cards.H100
    assert cards.card_for("NVIDIA H200", (9, 0), 139.8, table) == cards.H200
    assert cards.card_for("NVIDIA H800", (9, 0), 79.1, table) == cards.H100  # unnamed: nearest in memory
    assert cards.card_for("NVIDIA GH200 480GB", (9, 0), 94.5, table) == cards.H100
    assert cards.card_for("NVIDIA GH200 144G HBM3e", (9, 0), 143.8, table) == cards.H200
    assert cards.card_for("NVIDIA A100-SXM4-80GB", (8, 0), 79.1, table) == table[0]  # no sm_80 row: the first
    # a paged cache's pages hold whole key blocks of every card's decode (flash_api checks page sizes by it)
    assert {settings.config.block_n for settings in decode.BY_CARD.values()} == {module.flash_api.DECODE_BLOCK_N}


@pytest.mark.parametrize("card, reads_by_pointers", [("H100", {128: True, 1024: True, 2048: False}),
                                                      ("H200", {128: False, 1024: False, 2048: False})])
def test_short_splits_of_small_tiles_read_keys_by_pointer_loads_where_the_card_was_measured_faster_so(
        monkeypatch, card, reads_by_pointers):
    module = import_from_folder()
    decode, row = module.decode, getattr(sys.modules[f"{module.__name__}._cards"], card)
    monkeypatch.setattr(decode, "card_settings", lambda device: decode.BY_CARD[row])
    for keys_a_split, by_pointers in reads_by_pointers.items():
        tiles = decode.tiles_for((1, 1, 32, 128), (1, 4 * keys_a_split, 8, 128), 4, None, None, torch.device("cpu"))
        assert tiles.tma != by_pointers, keys_a_split
    cpu = torch.device("cpu")
    assert decode.tiles_for((1, 16, 32, 128), (1, 512, 8, 128), 4, None, None, cpu).tma  # 64-row tiles: TMA
    assert decode.tiles_for((1, 1, 32, 128), (1, 512, 8, 128), 4, (64, 2, True), None, cpu).tma  # as asked


@pytest.mark.parametrize("card, sixteen_fuse", [("H200", True), ("H100", False), (None, True)])
def test_only_tiles_of_many_rows_combine_their_splits_in_the_split_kernel_on_the_cards_measured_faster_so(
        monkeypatch, card, sixteen_fuse):
    """H200: 64-row tiles fuse the combine (faster there); H100: never (two kernels faster); None: the
    interpreter, which fuses as the H200 does, so the CPU tests run both combines."""
    module = import_from_folder()
    decode = module.decode
    if card:
        row = getattr(sys.modules[f"{module.__name__}._cards"], card)
        monkeypatch.setattr(decode, "card_settings", lambda device: decode.BY_CARD[row])
    cpu = torch.device("cpu")
    one_query, sixteen = ((8, q_len, 32, 128) for q_len in (1, 16))  # GQA 4: 4 and 64 rows a tile
    assert not decode.tiles_for(one_query, (8, 8192, 8, 128), 4, None, None, cpu).fused
    assert decode.tiles_for(sixteen, (8, 8192, 8, 128), 4, None, None, cpu).fused == sixteen_fuse
    assert not decode.tiles_for(sixteen, (8, 8192, 8, 128), 1, None, None, cpu).fused  # one split: nothing to combine
    assert decode.tiles_for(one_query, (8, 8192, 8, 128), 4, None, True, cpu).fused  # the benchmarks' override


@pytest.mark.parametrize("capability, interpreted, card, q_len, splits, fused, asked, dependent", [
    ((9, 0), False, "H100", 1, 4, False, True, True),  # two kernels on sm_90: the combine waits on the split grid
    ((9, 0), False, "H100", 1, 1, False, True, False),  # one split: no combine kernel
    ((9, 0), False, "H100", 1, 4, True, True, False),  # the fused combine: one kernel
    ((9, 0), False, "H100", 1, 4, False, None, True),  # the H100's 16-row tiles, measured faster so
    ((9, 0), False, "H100", 16, 4, False, None, False),  # its 64-row tiles: not faster at every length
    ((9, 0), False, "H200", 1, 4, False, None, False),  # the H200: not yet timed
    ((8, 0), False, "H100", 1, 4, False, True, False),  # no grid dependency control before sm_90
    ((9, 0), True, "H100", 1, 4, False, True, False)])  # nor in the interpreter
def test_the_combine_kernel_is_launched_as_the_split_kernels_dependent_only_where_it_can_be_and_was_faster(
        monkeypatch, capability, interpreted, card, q_len, splits, fused, asked, dependent):
    decode = import_from_folder().decode
    monkeypatch.setattr(decode, "card_settings", lambda device: decode.BY_CARD[getattr(decode._cards, card)])
    monkeypatch.setattr(decode, "interpreting", lambda: interpreted)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    tiles = decode.tiles_for((1, q_len, 32, 128), (1, 4096, 8, 128), splits, None, fused, torch.device("cuda", 0),
                             asked)
    assert tiles.pdl == (dependent and decode.GDC_AVAILABLE)
    q, k_cache, v_cache, out = (torch.empty(1, q_len, 32, 128) for _ in range(4))
    launched = decode.launches(q, k_cache, v_cache, out, 0.1, (1 << 30, 0), tiles)  # [split] or [split, combine]
    assert (len(launched) == 2 and launched[1][3].get("launch_pdl", False)) == tiles.pdl


def test_short_windows_take_more_row_blocks_per_program_than_long_windows_and_documents():
    masks = import_from_folder().masks
    unbounded = import_from_folder().flash_api.UNBOUNDED
    assert masks.gpu_config((255, 0), 128) == masks.SHORT_WINDOW_CONFIG  # window=256: 256 keys a row
    assert masks.gpu_config((masks.SHORT_WINDOW - 1, 0), 64) == masks.GPU_CONFIG
    assert masks.gpu_config((unbounded, 0), 128) == masks.gpu_config((unbounded, unbounded), 128) == masks.GPU_CONFIG
    assert masks.gpu_config((255, 0), 256) == masks.gpu_config((unbounded, 0), 192) == masks.WIDE_CONFIG  # 256 wide
    assert masks.SHORT_WINDOW_CONFIG[-1] > masks.GPU_CONFIG[-1]


BF16_TOLERANCE = 3e-2  # bf16 output rounding at magnitudes up to ~4 (a row that sees one key returns that value)


def _bf16(*shape, gen):
    return torch.randn(*shape, generator=gen).to(torch.bfloat16).cuda()


@pytest.mark.cuda
def test_on_the_gpu_decode_over_ragged_caches_matches_float64():
    module = import_from_folder()
    gen = torch.Generator().manual_seed(5)
    q, k_cache, v_cache = _bf16(3, 4, 8, 128, gen=gen), _bf16(3, 3000, 2, 128, gen=gen), _bf16(3, 3000, 2, 128, gen=gen)
    lens = torch.tensor([3000, 1000, 3], dtype=torch.int32, device="cuda")
    window = module.flash_api.window_bounds(True, (-1, -1))
    calls = {f"splits={splits}": functools.partial(module.flash_attn_with_kvcache, q, k_cache, v_cache,
                                                    cache_seqlens=lens, causal=True, num_splits=splits)
             for splits in (0, 1, 5)}
    calls |= {f"splits={splits} by pointer loads": lambda splits=splits: module.decode.decode(
                  q, k_cache, v_cache, lens, 128 ** -0.5, window, splits, config=(64, 2, False))[0]
              for splits in (1, 5)}
    for name, call in calls.items():
        out, planned = call(), call()  # the first call of a shape runs through the JIT and makes its plan
        assert torch.equal(out, planned), name
        for b, n in enumerate(lens.tolist()):
            want = reference(*(t[b, :m].cpu() for t, m in ((q, 4), (k_cache, n), (v_cache, n))),
                             keep_mask(4, n, True, (-1, -1), n - 4))[0]
            assert (out[b].cpu().double() - want).abs().max().item() < BF16_TOLERANCE, (name, b)


@pytest.mark.cuda
def test_on_the_gpu_the_combine_launched_as_a_dependent_gives_the_same_bits():
    """PDL lets the combine kernel start before the split kernel ends: without its wait it would read the
    partials the previous call left where this call's go (the allocator hands the same memory back), so calls on
    two caches alternate, planned and inside a CUDA graph, and each must equal the two kernels launched in turn."""
    decode = import_from_folder().decode
    if not decode.GDC_AVAILABLE or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("grid dependency control needs sm_90 and a Triton that has it")
    gen = torch.Generator().manual_seed(8)
    q = _bf16(1, 1, 32, 128, gen=gen)
    caches = [(_bf16(1, 16384, 8, 128, gen=gen), _bf16(1, 16384, 8, 128, gen=gen)) for _ in range(2)]
    lens = torch.full((1,), 16384, dtype=torch.int32, device="cuda")
    window = import_from_folder().flash_api.window_bounds(False, (-1, -1))

    def attend(cache, pdl):
        return decode.decode(q, *cache, lens, 128 ** -0.5, window, 16, pdl=pdl)[0]

    want = [attend(cache, False) for cache in caches]
    for _ in range(10):
        for cache, expected in zip(caches, want, strict=True):
            assert torch.equal(attend(cache, True), expected)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = [attend(cache, True) for cache in caches * 3]
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(got, want[i % 2]) for i, got in enumerate(captured))


@pytest.mark.cuda
@pytest.mark.parametrize("config", [None, (64, 64, 4, 3, 4), (128, 64, 8, 3, 1)])
def test_on_the_gpu_every_masked_configuration_matches_float64(config):
    masks = import_from_folder().masks
    gen = torch.Generator().manual_seed(6)
    q, k, v = _bf16(1, 1000, 8, 128, gen=gen), _bf16(1, 1000, 2, 128, gen=gen), _bf16(1, 1000, 2, 128, gen=gen)
    cu = torch.tensor([0, 300, 1000], dtype=torch.int32, device="cuda")  # two documents
    # the first call of a shape runs through the JIT and makes its plan, the second through the plan
    out, planned = (masks.masked_forward(q, k, v, cu, cu, 700, 128 ** -0.5, (255, 0), config=config)[0]
                    for _ in range(2))
    assert not out.isnan().any() and torch.equal(out, planned)
    for start, end in ((0, 300), (300, 1000)):
        want = reference(*(t[0, start:end].cpu() for t in (q, k, v)), keep_mask(end - start, end - start, True,
                                                                                (255, 0), 0))[0]
        assert (out[0, start:end].cpu().double() - want).abs().max().item() < BF16_TOLERANCE, (config, start)


@pytest.mark.cuda
def test_on_the_gpu_a_paged_cache_matches_the_same_cache_unpaged():
    module = import_from_folder()
    gen = torch.Generator().manual_seed(7)
    q = _bf16(3, 1, 32, 128, gen=gen)
    dense_k, dense_v = _bf16(3, 4096, 8, 128, gen=gen), _bf16(3, 4096, 8, 128, gen=gen)
    lens = torch.tensor([4096, 1000, 5], dtype=torch.int32, device="cuda")
    table = torch.randperm(3 * 16, generator=gen).reshape(3, 16).to(torch.int32).cuda()  # pages of 256 rows
    k_pages, v_pages = (torch.full((48, 256, 8, 128), float("nan"), dtype=torch.bfloat16, device="cuda")
                        for _ in range(2))
    for b, n in enumerate(lens.tolist()):
        for p in range(-(-n // 256)):
            rows = min(256, n - 256 * p)
            k_pages[table[b, p], :rows] = dense_k[b, 256 * p:256 * p + rows]
            v_pages[table[b, p], :rows] = dense_v[b, 256 * p:256 * p + rows]
    window = module.flash_api.window_bounds(False, (-1, -1))
    # flash-attn's call at the card's reads, then each read forced (decode() takes no block_table checks)
    calls = {(splits, "card"): functools.partial(module.flash_attn_with_kvcache, q, k_pages, v_pages,
                                                 cache_seqlens=lens, block_table=table, num_splits=splits)
             for splits in (0, 1, 5)}
    calls |= {(5, f"tma={tma}"): lambda tma=tma: module.decode.decode(
                  q, k_pages, v_pages, lens, 128 ** -0.5, window, 5, config=(64, 3, tma), block_table=table)[0]
              for tma in (True, False)}
    for (splits, reads), call in calls.items():
        paged = call()
        unpaged = module.flash_attn_with_kvcache(q, dense_k, dense_v, cache_seqlens=lens, num_splits=splits)
        assert not paged.isnan().any(), (splits, reads)  # the NaN rows past each sequence never reach the result
        assert (paged.float() - unpaged.float()).abs().max().item() < 1e-2, (splits, reads)

