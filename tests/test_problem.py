"""The problem: modes, GQA, masks and their validation; one FLOP and byte accounting for every mode."""

from __future__ import annotations

import pytest

from attnprof.problem import Mask, Problem, allowed


def test_a_forward_keeps_the_article_accounting_and_tag():
    p = Problem(batch=8, heads=16, seq=1024, head_dim=64)
    assert p.flops() == 4 * 8 * 16 * 1024**2 * 64 / 2 and p.tag == "8_16_1024_64_bf16"
    assert p.unit == "forward" and p.kv_heads == 16 and p.q_len == 1024


def test_a_training_step_counts_the_backward_at_two_and_a_half_times_the_forward():
    fwd, step = Problem(), Problem(mode="train")
    assert step.flops() == pytest.approx(3.5 * fwd.flops())
    assert step.min_bytes() == 3 * fwd.min_bytes()  # forward 2q + 2kv, backward 4q + 4kv
    assert step.unit == "step" and step.tag.endswith("_train")


def test_decode_reads_the_whole_cache_and_grouped_heads_read_fewer_kv_bytes():
    p = Problem(batch=8, heads=32, kv_heads=8, seq=8192, head_dim=128, mode="decode")
    cache = 8 * 8 * 8192 * 128 * 2 * 2
    assert p.q_len == 1 and p.kv_cache_bytes() == cache
    assert p.min_bytes() == cache + 2 * 8 * 32 * 128 * 2  # plus q read and the output written
    assert p.flops() == 4 * 8 * 32 * 128 * 8192  # one query sees all 8192 keys
    assert Problem(heads=32, kv_heads=8).min_bytes() < Problem(heads=32).min_bytes()


def test_a_window_counts_its_band_and_a_dense_mask_its_bytes():
    p = Problem(batch=1, heads=1, seq=4096, head_dim=64, mask="window=256")
    assert p.attended_pairs() == 4096 * 256 - 256 * 255 / 2
    dense = Problem(batch=1, heads=1, seq=4096, head_dim=64, mask="window=256", dense_mask=True)
    assert dense.min_bytes() - p.min_bytes() == 4096 * 4096
    assert dense.tag.endswith("_window256_dense")


@pytest.mark.parametrize("mask", ["causal", "none", "window=5", "document=8"])
@pytest.mark.parametrize("mode,q_len", [("fwd", None), ("decode", 1), ("decode", 7)])
def test_pairs_and_empty_tiles_agree_with_the_mask_tensor(mask, mode, q_len):
    p = Problem(batch=1, heads=2, seq=32, head_dim=8, mode=mode, mask=mask, q_len=q_len)
    keep = allowed(p, "cpu")
    assert keep.shape == (p.q_len, 32)
    if not (mask == "causal" and mode == "fwd"):  # a square causal mask counts S^2 / 2 by convention
        assert p.attended_pairs() == keep.sum().item()
    tiles = [keep[r : r + 4, c : c + 4].any().item() for r in range(0, p.q_len, 4) for c in range(0, 32, 4)]
    assert p.masked_tile_share(tile=4) == pytest.approx(tiles.count(False) / len(tiles))


@pytest.mark.parametrize("kwargs,words", [
    ({"mode": "prefill"}, "unknown mode"), ({"heads": 16, "kv_heads": 5}, "divide"),
    ({"mask": "window"}, "unknown mask"), ({"mask": "window=0"}, "positive"), ({"mask": "window=9999"}, "longer"),
    ({"mask": "none", "dense_mask": True}, "needs a mask"), ({"q_len": 4}, "decode"),
    ({"mode": "decode", "q_len": 5000}, "exceed"),
])
def test_a_bad_workload_is_one_sentence(kwargs, words):
    with pytest.raises(ValueError, match=words):
        Problem(**kwargs)


def test_a_problem_round_trips_through_its_dict_and_an_old_record_reads_as_before():
    p = Problem(batch=2, heads=8, kv_heads=2, seq=64, mode="decode", q_len=3, mask="window=16", dense_mask=True)
    assert Problem.from_dict(p.as_dict()) == p
    old = {"batch": 2, "heads": 8, "seq": 64, "head_dim": 64, "dtype": "bf16", "causal": False, "flops": 1.0}
    assert Problem.from_dict(old).mask == Mask("none")
    assert Mask.parse("document=128") == Mask("document", 128) and str(Mask("document", 128)) == "document=128"
