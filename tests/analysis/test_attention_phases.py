"""Forward and backward attention in a step whose forward and backward chunks interleave (FlashAttention-3's
Hopper kernels in a pipeline schedule: DeepSeek-V3's DualPipe runs a micro-batch's backward between two
forward chunks). Which phase a kernel is comes from the thread and the autograd node its launch ran in (and a
kernel whose name says backward is never a forward call), not from where it falls in the step: a SYNTHETIC
trace with known times."""

from __future__ import annotations

import json

import pytest

from attnprof.analysis import attention_calls, model_step
from attnprof.analysis.attribution import analyze_trace
from attnprof.trace.reader import parse

FWD = ("void flash::compute_attn_ws<Flash_fwd_kernel_traits<128, 128, 176, 2, 2, false, 1, cutlass::bfloat16_t>, "
       "true, false, false>(flash::Flash_fwd_params)")
BWD = ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnBwdSm90<cute::tuple<cute::C<64>>, "
       "cutlass::bfloat16_t> > >(flash::FlashAttnBwdSm90<>::Params)")
NODE = "autograd::engine::evaluate_function: FlashAttnFuncBackward"


def _trace(orphan_backward: bool = False) -> bytes:
    """Main thread 1: forward chunk A (GPU 100-200), forward chunk B (GPU 500-600); autograd's thread 2: the
    backward of an earlier micro-batch (GPU 200-500), launched inside its node; `orphan_backward`: a second
    backward kernel (GPU 600-650) launched from thread 1 outside any node (a hand-called backward)."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000}]

    def launch(corr, tid, t, name, start, end):
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid, "ts": t,
                   "dur": 2, "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": start, "dur": end - start,
                   "args": {"correlation": corr, "device": 0, "stream": 7}})

    ev.append({"ph": "X", "cat": "cpu_op", "name": "flash_attn_3::fwd", "pid": 1, "tid": 1, "ts": 10, "dur": 20})
    launch(1, 1, 12, FWD, 100, 200)
    ev.append({"ph": "X", "cat": "cpu_op", "name": NODE, "pid": 1, "tid": 2, "ts": 40, "dur": 40})
    launch(2, 2, 42, BWD, 200, 500)
    ev.append({"ph": "X", "cat": "cpu_op", "name": "flash_attn_3::fwd", "pid": 1, "tid": 1, "ts": 90, "dur": 20})
    launch(3, 1, 92, FWD, 500, 600)
    if orphan_backward:
        launch(4, 1, 120, BWD, 600, 650)
    return json.dumps({"schemaVersion": 1, "traceEvents": ev}).encode()


def test_interleaved_chunks_give_forward_and_backward_attention_their_own_time():
    a = analyze_trace(parse(_trace()), "ProfilerStep#*")
    step = model_step.summary(a)
    assert step["attention_us"] == {"forward": pytest.approx(200.0), "backward": pytest.approx(300.0)}
    assert step["share"]["forward"] == pytest.approx(200 / 500, abs=1e-4)  # the step's GPU time is 100-600
    calls = attention_calls.calls(a, a.forwards[0])
    assert [(c.implementation, c.backend, c.names) for c in calls] == [
        ("fused kernel", "FlashAttention-3", ["flash_attn_3::fwd"])] * 2


def test_a_backward_kernel_launched_outside_autograd_is_not_a_forward_call():
    a = analyze_trace(parse(_trace(orphan_backward=True)), "ProfilerStep#*")
    calls = attention_calls.calls(a, a.forwards[0])
    assert len(calls) == 2 and sum(c.gpu_us for c in calls) == pytest.approx(200.0)
