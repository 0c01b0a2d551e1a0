"""The compact table of names: first-seen codes, found again by hash, names that share a hash kept apart."""

from __future__ import annotations

import pytest

from attnprof.trace import names as names_module
from attnprof.trace import utf8_runs
from attnprof.trace.names import Names

BATCHES = [["a", "bb", "a", "ü∂ 中文"], ["c", "bb", "\ud800", "dd", "c"], ["a", "e" * 300, "dd"]]


def coded(batches: list[list[str]]) -> tuple[Names, list[list[int]]]:
    """The table and each batch's codes; frozen (as the reader leaves it) before the last batch."""
    table = Names()
    codes = [table.codes(b).tolist() for b in batches[:-1]]
    table.freeze()
    return table, [*codes, table.codes(batches[-1]).tolist()]


@pytest.mark.parametrize("few", [100, 3, 0], ids=["dict", "dict-then-hashes", "hashes"])
@pytest.mark.parametrize("clashing", [False, True], ids=["hashes", "every-hash-shared"])
def test_codes_are_first_seen_order_whatever_the_hashes(clashing, few, monkeypatch):
    monkeypatch.setattr(names_module, "FEW", few)
    if clashing:  # names of one length share a hash
        monkeypatch.setattr(names_module, "hash", len, raising=False)
    table, codes = coded(BATCHES)
    seen = list(dict.fromkeys(n for b in BATCHES for n in b))
    assert codes == [[seen.index(n) for n in b] for b in BATCHES]
    assert list(table) == seen == [table[i] for i in range(len(table))] and table == seen
    assert all(table.index(n) == i and n in table for i, n in enumerate(seen))
    assert "zz" not in table and table.find("zz") == -1 and table[-1] == seen[-1] and table[1:3] == seen[1:3]
    with pytest.raises(ValueError):
        table.index("zz")


@pytest.mark.parametrize("clashing", [False, True], ids=["hashes", "every-hash-shared"])
def test_names_seen_again_are_matched_by_their_bytes_in_steps(clashing, monkeypatch):
    monkeypatch.setattr(names_module, "FEW", 0)
    monkeypatch.setattr(utf8_runs, "_COMPARED", 2)  # the comparison with the blob in several steps
    if clashing:
        monkeypatch.setattr(names_module, "hash", len, raising=False)
    batches = [["ab", "ü", "", "ba"], ["ba", "", "ab", "ü", "aü", "ab"], [*"abcdefgh", "ü", "ab"]]
    table, codes = coded(batches)
    seen = list(dict.fromkeys(n for b in batches for n in b))
    assert codes == [[seen.index(n) for n in b] for b in batches] and list(table) == seen


def test_a_name_asked_for_again_is_one_object(monkeypatch):
    monkeypatch.setattr(names_module, "FEW", 0)
    table, _ = coded(BATCHES)
    asked = [[table[i] for _ in range(3)] for i in range(len(table))]
    assert all(a == b == c and b is c for a, b, c in asked) and list(table) == [a for a, _, _ in asked]


def test_a_name_is_kept_from_its_second_ask_on_and_codes_count_from_the_end_too(monkeypatch):
    monkeypatch.setattr(names_module, "FEW", 0)
    table, _ = coded(BATCHES)
    for i in range(len(table)):
        first, second = table[i], table[-len(table) + i]
        assert first == second and table[i] is second
        assert first is not second or len(first) < 2  # the first ask held none (CPython shares 1-character str)
    for code in (len(table), -len(table) - 1):
        with pytest.raises(IndexError):
            table[code]


@pytest.mark.parametrize("at_once", [1 << 15, 1, 3], ids=["all", "one", "three"])  # the names tested at once
@pytest.mark.parametrize("few", [100, 0], ids=["dict", "hashes"])
def test_starting_with_is_str_startswith_on_every_name(few, at_once, monkeypatch):
    monkeypatch.setattr(names_module, "FEW", few)
    monkeypatch.setattr(names_module, "_TESTED_AT_ONCE", at_once)
    table, _ = coded([*BATCHES, ["", "aten::mm", "aten:", "ü∂x", "\ud800\ud800"]])
    for prefix in ["", "a", "aten::", "aten:", "ü", "ü∂", "\ud800", "e" * 300, "e" * 301, "zz"]:
        assert table.starting_with(prefix).tolist() == [n.startswith(prefix) for n in table]
    assert Names().starting_with("a").tolist() == []


@pytest.mark.parametrize("few", [100, 0], ids=["dict", "hashes"])
def test_among_is_membership_on_every_name(few, monkeypatch):
    monkeypatch.setattr(names_module, "FEW", few)
    table, _ = coded(BATCHES)
    for wanted in [(), ("a",), ("dd", "zz", "\ud800"), ("e" * 300, "ü∂ 中文", "a", "a")]:
        assert table.among(wanted).tolist() == [n in wanted for n in table]


@pytest.mark.parametrize("few", [100, 0], ids=["dict", "hashes"])
def test_joined_is_the_names_bytes_one_after_the_other(few, monkeypatch):
    monkeypatch.setattr(names_module, "FEW", few)
    table, _ = coded([*BATCHES, ["", "x"]])
    for codes, sep in [([], b"\0"), ([0], b"\0"), ([3, 0, 3, len(table) - 2], b"\0"), (range(len(table)), b""),
                       ([1, 4, 2], b"--")]:
        data, ends = table.joined(codes, sep)
        names = [table[c].encode("utf-8", "surrogatepass") for c in codes]
        assert data == b"".join(n + sep for n in names)
        assert [data[e - len(n):e] for e, n in zip(ends.tolist(), names, strict=True)] == names


@pytest.mark.parametrize("frozen", [False, True], ids=["coding", "frozen"])
@pytest.mark.parametrize("few", [100, 3, 0], ids=["dict", "dict-then-hashes", "hashes"])
@pytest.mark.parametrize("clashing", [False, True], ids=["hashes", "every-hash-shared"])
def test_another_tables_names_taken_in_are_coded_as_their_str_would_be(clashing, few, frozen, monkeypatch):
    """`absorb(part)` (another process's table, taken as bytes and hashes) gives the codes and the table that
    coding its names as str gives, and coding goes on alike: a range read apart merges into one table."""
    monkeypatch.setattr(names_module, "FEW", few)
    if clashing:
        monkeypatch.setattr(names_module, "hash", len, raising=False)
    theirs, ours, reference = Names(), Names(), Names()
    for batch in BATCHES[1:]:
        theirs.codes(batch)
    for table in (ours, reference):
        table.codes(BATCHES[0])
        if frozen:
            table.freeze()
    assert ours.absorb(theirs.part()).tolist() == reference.codes(list(theirs)).tolist()
    assert list(ours) == list(reference) and [ours.find(n) for n in [*reference, "zz"]] == [*range(len(ours)), -1]
    more = ["new", *BATCHES[2], "\ud800"]
    assert ours.codes(more).tolist() == reference.codes(more).tolist() and list(ours) == list(reference)
