"""Why `attnprof run --mode train` read our step's back-to-back device time at 1.17 ms (unstable) at the article's
problem, against 324 us for 100 back-to-back steps outside the harness. On the GPU machine:

    PYTHONPATH=src python3 benchmarks/kernel/harness_train_timing.py

For our step and cuDNN's (alternating, ours twice), through the harness's own pieces (RotatingCall,
training_step, block_us, time_cuda) on B8 H16 S1024 D64 causal bf16: back-to-back µs per step in blocks of 50
calls and in blocks of the harness's size (its calls_per_block from the latency), with the host's own time per
call inside the block and the SM clock read by NVML after it, before and after a graph-capture attempt (whose
exception is printed, in each capture error mode); then time_cuda as the harness runs it, with and without
graphs. Read the lines beside each other: what changes the harness-sized blocks' device time is the cause.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from triton_kernel_path import load_flash_attn_triton  # noqa: E402

from attnprof.harness import measure  # noqa: E402
from attnprof.harness.steps import training_step  # noqa: E402

SHAPE = (8, 16, 1024, 64)


def sm_clock() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return f"{pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)} MHz"
    except Exception as e:  # noqa: BLE001 - a reading, not a requirement
        return f"no clock ({type(e).__name__})"


def blocks(call, calls: int, count: int) -> str:
    """Device µs per call of `count` blocks of `calls` back-to-back calls, the host's µs per call in each."""
    device, host = [], []
    for _ in range(count):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        device.append(measure.block_us(call, calls, "cuda") / calls)
        host.append((time.perf_counter() - t0) * 1e6 / calls)
    return (f"{calls}-call blocks: device {statistics.median(device):.1f} us ({min(device):.1f}-{max(device):.1f}), "
            f"wall {statistics.median(host):.1f}; SM {sm_clock()}")


def capture(call, calls: int, mode: str) -> str:
    """One capture of `calls` calls as measure._captured makes it, in this error mode: its replay µs per
    call, or the exception that refused it."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            call()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode=mode):
            for _ in range(calls):
                call()
    except Exception as e:  # noqa: BLE001 - what refused it is the reading
        torch.cuda.synchronize()
        return f"capture ({mode}) refused: {type(e).__name__}: {' '.join(str(e).split())[:300]}"
    graph.replay()
    replay = [measure.block_us(graph.replay, 1, "cuda") / calls for _ in range(5)]
    return f"capture ({mode}) replay {statistics.median(replay):.1f} us per call"


def diagnose(name: str, forward, args) -> None:
    inputs = tuple(t.clone() for t in args)
    call = measure.RotatingCall(training_step(forward, inputs), inputs, 1)
    for _ in range(5):
        call()
    latency, host = measure._latency_and_host(call, 10)
    calls = measure.calls_per_block(statistics.median(latency), "cuda")
    print(f"{name}: one call after a sync: host {statistics.median(host):.1f} us, latency "
          f"{statistics.median(latency):.1f}; harness block {calls} calls", flush=True)
    print(f"  before capture: {blocks(call, 50, 3)}; {blocks(call, calls, 5)}", flush=True)
    for mode in ("global", "thread_local", "relaxed"):
        print(f"  {capture(call, calls, mode)}", flush=True)
        print(f"  after it: {blocks(call, 50, 3)}; {blocks(call, calls, 5)}", flush=True)
    gc.disable()  # Python's cyclic collector out of the blocks: does it account for the gap?
    print(f"  collector off: {blocks(call, calls, 5)}", flush=True)
    gc.enable()
    for graph in (True, False):
        t = measure.time_cuda(call, 10, use_graph=graph, min_time_s=0.2)
        print(f"  time_cuda(use_graph={graph}): device {t.device_us.median:.1f} us ({t.device_method}, "
              f"{t.device_us.p25:.1f}-{t.device_us.p75:.1f}, {t.device_us.unstable or 'stable'}) host {t.host_us} "
              f"latency {t.latency_us.median:.1f}", flush=True)


def main() -> None:
    module, how = load_flash_attn_triton()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, kernel {how}", flush=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    args = tuple(torch.randn(*SHAPE, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))

    def cudnn(q, k, v):
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    def ours(q, k, v):
        return module.attention(q, k, v, causal=True)

    with torch.no_grad():  # as the harness runs every variant (runner._run), the step enabling grad itself
        for name, forward in (("ours", ours), ("cudnn", cudnn), ("ours again", ours)):
            diagnose(name, forward, args)


if __name__ == "__main__":
    main()
