"""analysis.name_tests.may_hold, the prefilter of names that may hold a text: every name that holds one of the
parts (lowered, as `str.lower` does) is kept, whatever the blob's cut into BLOB names; only names past ASCII
are kept without holding one. made_afresh, the names at codes from their bytes."""

from __future__ import annotations

import numpy as np
import pytest

from attnprof.analysis import name_tests
from attnprof.trace.names import Names

NAMES = ["autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0", "MmBackward0",
         "FlexAttentionBackward", "my_ATTN_fn", "attent", "xattnx", "tn", "", "\u0130attention", "ATTENTİON",
         "ü attn", "üöä", "\ud800", "a\tattention\0b", "scaled_dot_product", "SCALEDDOTPRODUCTx"]
PARTS = ("scaleddotproduct", "attention", "attn")


@pytest.mark.parametrize("blob", [1, 3, 2048])
def test_may_hold_keeps_every_name_holding_a_part_and_drops_ascii_ones_that_do_not(blob, monkeypatch):
    monkeypatch.setattr(name_tests, "BLOB", blob)
    table = Names()
    table.codes(NAMES)
    codes = np.array([5, 0, 3, 3, *range(len(NAMES))], np.int64)
    kept = name_tests.may_hold(table, codes, PARTS).tolist()
    for code, keep in zip(codes.tolist(), kept, strict=True):
        name = table[code]
        holds = any(part in name.lower() for part in PARTS)
        assert keep == (holds or not name.isascii()), name
    assert name_tests.may_hold(table, np.zeros(0, np.int64), PARTS).tolist() == []


@pytest.mark.parametrize("blob", [1, 3, 2048])
@pytest.mark.parametrize("few", [100, 0], ids=["dict", "hashes"])
def test_made_afresh_is_each_name_at_the_codes_in_order(blob, few, monkeypatch):
    monkeypatch.setattr(name_tests, "BLOB", blob)
    monkeypatch.setattr("attnprof.trace.names.FEW", few)
    table = Names()
    table.codes(NAMES)
    codes = [5, 0, 3, 3, *range(len(NAMES)), 15]
    assert list(name_tests.made_afresh(table, codes)) == [NAMES[c] for c in codes]
    assert list(name_tests.made_afresh(NAMES, codes)) == [NAMES[c] for c in codes]  # a plain list of names
    assert list(name_tests.made_afresh(table, [])) == []


@pytest.mark.parametrize("few", [8192, 0], ids=["dict", "hashes"])
def test_passing_is_the_test_of_each_codes_name(few, monkeypatch):
    from attnprof.analysis.attribution import analyze_trace
    from attnprof.trace.reader import load
    from support import FIXTURES

    monkeypatch.setattr("attnprof.trace.names.FEW", few)
    a = analyze_trace(load(FIXTURES / "h200" / "train_4_16_1024_64_bf16_naive.json.gz"))
    names = a.trace.columns.names
    codes = a.trace.columns.name[::7]
    tests = [name_tests.Among(("aten::bmm", "aten::softmax", "no such op", "aten::bmm")), name_tests.Among(()),
             name_tests.starting("aten::"), lambda n: "Backward" in n]
    for test in tests:
        assert name_tests.passing(a, test, codes).tolist() == [test(names[c]) for c in codes.tolist()]
    assert name_tests.passing(a, tests[0], codes).any()
