"""pipeline/memory.py, the one memory policy: lean() pauses the cyclic GC and numpy's huge pages for its
block and puts both back as they were; the rules are told when to trim (after each rule, and once the op
trees are gone), and know nothing of how."""

from __future__ import annotations

import gc

import numpy as np

from attnprof.analysis.attribution import analyze_trace
from attnprof.findings import RULES, run_findings
from attnprof.pipeline.memory import handed_back, lean
from attnprof.trace.reader import load
from support import FIXTURES

try:
    from numpy._core.multiarray import _set_madvise_hugepage as set_huge_pages
except ImportError:  # numpy 1
    from numpy.core.multiarray import _set_madvise_hugepage as set_huge_pages


def _huge_pages_now() -> bool:
    previous = set_huge_pages(True)
    set_huge_pages(previous)
    return previous


def test_lean_pauses_the_gc_and_huge_pages_and_puts_back_what_was_there():
    assert gc.isenabled()
    before = _huge_pages_now()
    with lean():
        assert not gc.isenabled() and _huge_pages_now() is False
        np.empty(1 << 20)
    assert gc.isenabled() and _huge_pages_now() == before
    gc.disable()
    try:
        with lean():
            pass
        assert not gc.isenabled()  # a GC the caller had paused stays paused
    finally:
        gc.enable()


def test_the_rules_are_told_to_trim_after_each_rule_and_once_the_trees_go():
    a = analyze_trace(load(FIXTURES / "h200" / "train_4_16_1024_64_bf16_naive.json.gz"))
    calls = []
    run_findings(a, after_rule=lambda: calls.append(1))
    assert len(calls) == sum(1 for r in RULES.values() if r.check) + 1  # + the op trees dropped
    assert handed_back("section") == "section"
