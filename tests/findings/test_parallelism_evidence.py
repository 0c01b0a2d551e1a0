"""Context-parallel findings fire only on ring attention's signature (analysis.ring: K/V moved by send/recv or
all-gather right around attention kernels that run in pieces), never on NCCL next to kernels merely called
cuDNN or flash; exposed-comm's advice follows what the communication is for. SYNTHETIC traces whose kernels are
chosen to tell the cases apart, and the corpus's real DDP (hta/nccl: ResNet, cuDNN convolutions, gradient
all-reduce) and LLM-serving (tl/b200) traces."""

from __future__ import annotations

import json

import pytest

from attnprof.analysis.attribution import analyze_trace
from attnprof.analysis.ring import collective_of, parallelism
from attnprof.api import analyze
from attnprof.findings import run_findings
from attnprof.findings.cp_imbalance import check_ranks
from attnprof.trace.reader import parse
from support import corpus_trace
from synthetic_ranks import rank_trace

CONV = "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x128x32_execute_kernel_cudnn_infer"
ALL_REDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def _ddp_step() -> bytes:
    """Three steps of a data-parallel job: convolutions and a flash-named BN kernel forward (thread 1),
    their backward in autograd nodes (thread 2), a gradient all-reduce on stream 20 of which 150 µs run
    after the last compute kernel."""
    events, corr = [], 0
    for s in range(3):
        t0 = 10_000.0 + 2000 * s
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1,
                       "ts": t0, "dur": 1990})
        events.append({"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: "
                       "ConvolutionBackward0", "pid": 1, "tid": 2, "ts": t0 + 100, "dur": 100})
        for name, tid, launch, start, end, stream in (
                (CONV, 1, 10, 100, 300, 7), ("void cudnn::bn_fw_flash_1C11<float>(float)", 1, 20, 300, 350, 7),
                (CONV, 2, 110, 400, 700, 7), (ALL_REDUCE, 2, 150, 500, 850, 20)):
            corr += 1
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid,
                           "ts": t0 + launch, "dur": 4, "args": {"correlation": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": t0 + start,
                           "dur": end - start, "args": {"correlation": corr, "device": 0, "stream": stream}})
    doc = {"schemaVersion": 1, "traceEvents": events, "distributedInfo": {"backend": "nccl", "rank": 0,
                                                                         "world_size": 2}}
    return json.dumps(doc).encode()


def test_a_data_parallel_job_gets_data_parallel_advice_and_no_context_parallel_finding():
    a = analyze_trace(parse(_ddp_step()), "ProfilerStep#*")
    job = parallelism(a)
    assert not job.ring_attention and job.main_collective == "AllReduce" and job.attention_kernels == 0
    found = {f["id"]: f for f in run_findings(a)}
    assert "cp-merge-overhead" not in found
    exposed = found["exposed-comm"]
    assert exposed["cost_us"] == pytest.approx(150.0)
    assert "gradient_as_bucket_view" in exposed["fix"] and "rotate" not in exposed["fix"]
    assert "mostly AllReduce" in exposed["message"]


def test_ring_attention_s_exchanges_next_to_its_attention_kernels_are_its_signature():
    a = analyze_trace(parse(json.dumps(rank_trace(0, 2)).encode()), "ProfilerStep#*")
    job = parallelism(a)
    assert job.ring_attention and (job.kv_exchanges, job.attention_kernels) == (2, 2)
    found = {f["id"]: f for f in run_findings(a)}
    assert "cp-merge-overhead" in found and "set_rotate_method" in found["exposed-comm"]["fix"]


def test_the_collective_is_read_from_both_nccl_name_styles():
    assert collective_of(ALL_REDUCE) == "AllReduce"
    assert collective_of("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") == "SendRecv"
    assert collective_of("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == "AllGather"


@pytest.mark.parametrize("ring, fires", [(True, True), (False, False)])
def test_cp_imbalance_needs_ring_attention_on_every_rank(ring, fires):
    ranks = [{"rank": r, "instances": 3, "compute_us": us, "ring_attention": ring} for r, us in ((0, 500), (1, 900))]
    assert bool(check_ranks({"ranks": ranks, "distributed": {}})) is fires


def test_the_resnet_ddp_trace_has_no_context_parallel_finding_and_data_parallel_advice():
    result = analyze(corpus_trace("hta/nccl/nccl_data.json.gz"), region="ProfilerStep#*")
    found = {f["id"]: f for f in result["findings"]}
    assert not [fid for fid in found if fid.startswith("cp-")]
    assert "bucket_cap_mb" in found["exposed-comm"]["fix"] and "context" not in found["exposed-comm"]["fix"]
    assert found["exposed-comm"]["evidence"]["parallelism"]["main_collective"] == "AllReduce"
    assert "sm-underfill" not in found  # its all-reduce runs on 8 blocks by design: no split-KV advice for NCCL


def test_the_b200_serving_trace_s_all_gather_is_no_ring():
    result = analyze(corpus_trace("tl/b200/eager_trace.json.gz"))
    assert not [f for f in result["findings"] if f["id"].startswith("cp-")]
    assert not [f for f in result["findings"] if "of the attention time" in f["message"]]
