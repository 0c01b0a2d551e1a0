"""What the analysis keeps: the op trees are the rules' and the dict drops them after the rules, a
hand-written call's chain stays rows; nothing read afterwards moves."""

from __future__ import annotations

import json

from attnprof.analysis import attention_calls
from attnprof.analysis.attribution import analyze_trace
from attnprof.analysis.rows import OpRows
from attnprof.pipeline import analysis_dict
from attnprof.trace.reader import load
from support import FIXTURES

STEP = FIXTURES / "h200" / "train_4_16_1024_64_bf16_naive.json.gz"


def test_the_dict_drops_the_op_trees_and_a_second_dict_is_the_same():
    a = analyze_trace(load(STEP))
    first = json.dumps(analysis_dict(a))
    assert "tree" not in a.caches
    assert json.dumps(analysis_dict(a)) == first  # the rules build their trees again


def test_a_hand_written_calls_chain_is_rows_named_from_the_codes():
    a = analyze_trace(load(STEP))
    hand = [c for f in a.forwards for c in attention_calls.calls(a, f) if c.implementation == "hand-written"]
    assert hand and all(isinstance(c.ops, OpRows) for c in hand)
    assert all(c.names == [op.name for op in c.ops] for c in hand)

