"""The ops an attention call is entered by: `aten::scaled_dot_product_attention`; its backend op alone in a
compiled graph (no SDPA op above it: tl/compile_triton, AOTriton's `attn_fwd` under
`aten::_scaled_dot_product_flash_attention`); nn.MultiheadAttention's fast path; a custom op's fused kernel
(`flash_attn::_flash_attn_forward`). SYNTHETIC traces with known times, and the corpus trace."""

from __future__ import annotations

import json

import pytest

from attnprof.analysis import attention_calls
from attnprof.analysis.attribution import analyze_trace
from attnprof.api import analyze
from attnprof.trace.reader import parse
from support import corpus_trace

MEM_EFFICIENT = ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::"
                 "bfloat16_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)")


def _calls(*ops: tuple[str, float, float], kernel: str = MEM_EFFICIENT) -> list:
    """A forward region [0, 100] whose ops (name, start, end) nest as given; the innermost launches `kernel`
    (GPU 200-260)."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "forward", "pid": 1, "tid": 1, "ts": 0, "dur": 100}]
    ev += [{"ph": "X", "cat": "cpu_op", "name": n, "pid": 1, "tid": 1, "ts": lo, "dur": hi - lo} for n, lo, hi in ops]
    ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 40, "dur": 2,
               "args": {"correlation": 1}})
    ev.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": 200, "dur": 60,
               "args": {"correlation": 1, "device": 0, "stream": 7}})
    a = analyze_trace(parse(json.dumps({"traceEvents": ev}).encode()), "forward")
    return [(c.implementation, c.backend, c.names, c.gpu_us) for c in attention_calls.calls(a, a.forwards[0])]


def test_a_compiled_graphs_backend_op_is_an_sdpa_call_with_its_kernel():
    assert _calls(("aten::_scaled_dot_product_efficient_attention", 10, 90)) == [
        ("sdpa", "efficient", ["aten::_scaled_dot_product_efficient_attention"], 60.0)]


def test_under_the_sdpa_op_the_backend_op_is_not_a_second_call():
    assert _calls(("aten::scaled_dot_product_attention", 5, 95),
                  ("aten::_scaled_dot_product_efficient_attention", 10, 90)) == [
        ("sdpa", "efficient", ["aten::scaled_dot_product_attention"], 60.0)]


def test_the_multihead_attention_fast_path_is_a_call_with_its_sdpa_backend():
    assert _calls(("aten::_native_multi_head_attention", 5, 95),
                  ("aten::_scaled_dot_product_efficient_attention", 10, 90)) == [
        ("multi-head attention", "efficient", ["aten::_native_multi_head_attention"], 60.0)]


def test_a_flash_attn_custom_op_s_kernel_is_a_fused_call_named_after_the_op():
    fa2 = "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::half_t>>()"
    assert _calls(("flash_attn::_flash_attn_forward", 10, 90), kernel=fa2) == [
        ("fused kernel", "FlashAttention-2", ["flash_attn::_flash_attn_forward"], 60.0)]


def test_the_compiled_graph_trace_shows_attn_fwd_in_its_sdpa_call():
    d = analyze(corpus_trace("tl/compile_triton/trace.json.gz"))
    assert d["attention_calls"] == [{"implementation": "sdpa (flash)", "calls_per_forward": 1.0,
                                     "time_us_per_forward": 3683.509, "time_us_spread": [3683.509, 3683.509],
                                     "share": 0.2935}]  # attn_fwd's dur in the JSON (one forward: no spread)
    sdpa = next(f for f in d["findings"] if f["id"] == "sdpa-dispatch")
    assert sdpa["evidence"]["gpu_activities_per_forward"] == 1 and sdpa["cost_us"] == pytest.approx(3683.509)
