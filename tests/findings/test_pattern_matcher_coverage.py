"""What torch's private anti-pattern matcher (torch.profiler._pattern_matcher) catches in a forward,
attnprof's findings catch too, from the trace alone (docs/pattern_matcher.md has the whole comparison):
ExtraCUDACopyPattern -> host-copy, FP32MatMulPattern -> tensor-cores, MatMulDimInFP16Pattern ->
gemm-alignment."""

from __future__ import annotations

import json

import pytest

from attnprof.analysis import attribution as analysis
from attnprof.findings import run_findings
from attnprof.trace import reader as trace


def x(name, cat, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def findings_of(events: list[dict]) -> dict:
    a = analysis.analyze_trace(trace.parse(json.dumps({"traceEvents": events}).encode()))
    return {f["id"]: f for f in run_findings(a)}


def test_a_tensor_made_on_the_cpu_and_moved_each_forward_is_host_copy():
    events = [x("attn_fwd", "user_annotation", 0, 100),
              x("aten::zeros", "cpu_op", 1, 5), x("aten::to", "cpu_op", 10, 40), x("aten::_to_copy", "cpu_op", 11, 38),
              x("aten::copy_", "cpu_op", 12, 36, **{"Input Dims": [[1024, 1024], [1024, 1024]],
                                                   "Input type": ["float", "float"]}),
              x("cudaMemcpyAsync", "cuda_runtime", 13, 30, correlation=5),
              x("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 20, 25, pid=0, tid=7, correlation=5, bytes=4 << 20)]
    f = findings_of(events)["host-copy"]
    assert f["evidence"]["copies"][0]["chain"][:3] == ["aten::to", "aten::_to_copy", "aten::copy_"]
    assert f["cost_us"] == 25.0 and "device=x.device" in f["fix"] and f["evidence"]["bytes_per_forward"] == 4 << 20


def test_a_16_bit_gemm_on_dimensions_not_multiple_of_8_is_gemm_alignment():
    shapes = {"Input Dims": [[4096, 100], [100, 4096]], "Input type": ["c10::BFloat16", "c10::BFloat16"]}
    events = [x("attn_fwd", "user_annotation", 0, 100), x("aten::mm", "cpu_op", 1, 50, **shapes),
              x("cudaLaunchKernel", "cuda_runtime", 2, 5, correlation=9),
              x("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_nn", "kernel", 20, 40, pid=0, tid=7, correlation=9)]
    f = findings_of(events)["gemm-alignment"]
    assert f["evidence"]["gemms"][0]["op"] == "aten::mm" and f["cost_us"] == 40.0 and "multiples of 8" in f["fix"]
    aligned = {"Input Dims": [[4096, 128], [128, 4096]], "Input type": ["c10::BFloat16", "c10::BFloat16"]}
    assert "gemm-alignment" not in findings_of([*events[:1], x("aten::mm", "cpu_op", 1, 50, **aligned), *events[2:]])


@pytest.mark.parametrize("op, dims, flagged", [
    ("aten::mm", [[141, 4096], [4096, 4096]], False),  # M = 141 tokens: rows are not vectorised over
    ("aten::mm", [[1, 2880], [2880, 25136]], False),  # decode's M = 1 (tl/b200's lm_head, 25136 = 8 x 3142)
    ("aten::mm", [[4096, 128], [128, 100]], True),  # N = 100
    ("aten::addmm", [[4096], [141, 4096], [4096, 4100]], True),  # addmm: bias first; N = 4100
    ("aten::addmm", [[141, 4096], [141, 4096], [4096, 4096]], False),  # a 2-d bias [M, N] is no operand
    ("aten::bmm", [[16, 1, 100], [16, 100, 64]], True),  # K = 100
])
def test_gemm_alignment_looks_at_k_and_n_never_m(op, dims, flagged):
    shapes = {"Input Dims": dims, "Input type": ["c10::BFloat16"] * len(dims)}
    events = [x("attn_fwd", "user_annotation", 0, 100), x(op, "cpu_op", 1, 50, **shapes),
              x("cudaLaunchKernel", "cuda_runtime", 2, 5, correlation=9),
              x("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_nn", "kernel", 20, 40, pid=0, tid=7, correlation=9)]
    assert ("gemm-alignment" in findings_of(events)) is flagged


def test_an_fp32_gemm_on_cuda_cores_is_tensor_cores_with_the_tf32_fix():
    events = [x("attn_fwd", "user_annotation", 0, 100), x("aten::mm", "cpu_op", 1, 50),
              x("cudaLaunchKernel", "cuda_runtime", 2, 5, correlation=9),
              x("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_"
                "execute_kernel__5x_cublas", "kernel", 20, 40, pid=0, tid=7, correlation=9)]
    f = findings_of(events)["tensor-cores"]
    assert f["cost_us"] == 40.0 and "allow_tf32" in f["fix"]


@pytest.mark.cuda
def test_on_a_gpu_every_pattern_torch_matches_has_its_finding(tmp_path):
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function
    from torch.profiler._pattern_matcher import ExtraCUDACopyPattern, FP32MatMulPattern, MatMulDimInFP16Pattern

    from attnprof.pipeline.one_trace import analyze_path

    a32, b16 = torch.randn(512, 512, device="cuda"), torch.randn(512, 100, device="cuda", dtype=torch.bfloat16)
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                     with_stack=True) as prof:
            with record_function("attn_fwd"):
                torch.zeros(256, 256).to("cuda")
                a32 @ a32
                b16.t() @ b16
            torch.cuda.synchronize()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = True
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path))
    ours = {f["id"] for f in analyze_path(path)["findings"]}
    for pattern, finding in ((ExtraCUDACopyPattern, "host-copy"), (FP32MatMulPattern, "tensor-cores"),
                             (MatMulDimInFP16Pattern, "gemm-alignment")):
        if pattern(prof).matched_events():
            assert finding in ours, (pattern.__name__, ours)


def test_a_recorded_decode_step_s_m_of_1_is_not_gemm_alignment():
    """The H200 decode trace's hand-written attention runs bmm [256, 1, 128] x [256, 128, 8192] and
    [256, 1, 8192] x [256, 8192, 128]: M = 1 (one query per sequence), K and N multiples of 8."""
    from attnprof.findings import gemm_alignment
    from support import H200

    a = analysis.analyze_trace(trace.load(H200 / "decode_8_32_8_8192_128_bf16_naive.json.gz"))
    assert gemm_alignment.check(a) == []
