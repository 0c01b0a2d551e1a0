"""What the analysis keeps: the op trees are the rules' and go once the rules that walk them ran, a
hand-written call's chain stays rows, the GEMM rules' decoded names are bits, not decode's cache; nothing
read afterwards moves."""

from __future__ import annotations

import json

import pytest

from attnprof.analysis import attention_calls, queries
from attnprof.analysis.attribution import all_gpu, analyze_trace
from attnprof.analysis.rows import OpRows
from attnprof.findings import RULES, run_findings
from attnprof.findings.run_facts import BARE
from attnprof.gpu import kernel_names as kn
from attnprof.pipeline.one_trace import analysis_dict
from attnprof.trace.reader import load
from support import FIXTURES

STEP = FIXTURES / "h200" / "train_4_16_1024_64_bf16_naive.json.gz"
WALKERS = tuple(fid for fid, rule in RULES.items() if rule.walks_op_trees)


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



def test_the_rules_kernel_bits_are_what_decode_says_of_every_name():
    for path in sorted(FIXTURES.glob("h200/*.json.gz"))[:12]:
        a = analyze_trace(load(path))
        gpu = all_gpu(a)
        bits = queries.kernel_bits(a, gpu)
        for name, b in zip((gpu.names[code] for code in gpu.name.tolist()), bits.tolist(), strict=True):
            info = kn.decode(name)
            want = (queries.IS_GEMM * info.is_gemm | queries.IS_ATTENTION * info.is_attention
                    | queries.TENSOR_CORES * (info.tensor_cores is True)
                    | queries.CUDA_CORES * (info.tensor_cores is False) | queries.FP32 * (info.dtype == "fp32"))
            assert b == (want if kn.could_be(name) else 0), name


def test_the_gemm_rules_leave_no_gemm_name_in_decodes_cache():
    # bf16 GEMMs, ops that record bf16 inputs: fp32-gemm tests every GEMM name and finds none
    a = analyze_trace(load(FIXTURES / "h200" / "8_16_1024_64_bf16_naive_shapes.json.gz"))
    gpu = all_gpu(a)
    gemms = {name for name in map(gpu.names.__getitem__, gpu.name.tolist()) if kn.decode.__wrapped__(name).is_gemm}
    assert gemms
    kn.decode.cache_clear()
    assert run_findings(a, only=("fp32-gemm",)) == []
    hits = kn.decode.cache_info().hits
    for name in gemms:
        kn.decode(name)
    assert kn.decode.cache_info().hits == hits  # each decoded afresh: none was kept


@pytest.mark.parametrize("path", [STEP, *sorted(FIXTURES.glob("h200/*_sdpa-math.json.gz")),
                                  FIXTURES / "h200" / "llama_fwd_eager.json.gz",
                                  FIXTURES / "h200" / "gqa_2_32_8_2048_128_bf16_naive.json.gz"],
                         ids=lambda p: p.name)
def test_the_rules_run_after_the_op_trees_go_build_none(path):
    a = analyze_trace(load(path))
    run_findings(a, only=WALKERS)
    assert "tree" not in a.caches  # dropped once those rules ran
    for fid, rule in RULES.items():
        if rule.check and not rule.walks_op_trees:
            rule.check(a, BARE)
            assert "tree" not in a.caches, fid
