"""Host time of a training step's Python through attention() with the kernel launches replaced by no-ops:
what the wrappers, the autograd.Function and the plans cost per step, on any machine, no GPU needed.

    PYTHONPATH=src python3 benchmarks/kernel/triton_step_host_cost.py [--profile | --gpu]

A step is `torch.autograd.grad(attention(q, k, v, causal=True), (q, k, v), dout)`, as the lead's H200
measurement and triton_host_cost.py. The plans are real (_forward_plans._Plan, _plans.run_plan with
CompiledLaunch), only each compiled runner is a no-op: Triton's launcher (a few us per launch on the
H200) and the CUDA autograd engine's hand-off to its device thread are left out. CPU tensors, fp16,
B1 H2 S128 D64; variants in alternating rounds, best of ROUNDS rounds of CALLS steps each (this VM is
shared: the best round is the one least disturbed; process time, not wall time). For scale, the same step
through _ops.attend (attention() less its argument handling) and the same through Function.apply's
Python (which attend skips), through the custom op in eager
(what torch.compile traces), through a trivial autograd.Function (three torch.empty_like as its backward) and
through one C++ autograd node (torch.add).
--profile: cProfile of our step, by own time.

--gpu (on a GPU, bf16, the real launches): the host time per step with no synchronisation (so the GPU
waits for the host at this tiny shape) of ours, SDPA's cuDNN backend, the trivial Function and the C++
node, alternating rounds; then ours again with the same plans launched through Triton's own runner
(CompiledKernel[grid], what the prepared launch of _prepared_launch replaces), and with every launch a
no-op (what the launches cost is the difference; the engine's hand-off to its CUDA thread is in every
row), each beside cuDNN's again; and a cProfile of our real step.
"""

from __future__ import annotations

import cProfile
import gc
import pstats
import sys
import time
import warnings

import torch

from attnprof.kernels import import_from_folder

CALLS, ROUNDS = 300, 25
SHAPE = (1, 2, 128, 64)


class _StubKernel:
    """A kernel whose JIT launch 'compiles' to a runner that does nothing (what CompiledLaunch keeps)."""

    def __init__(self, kernel):
        self.arg_names = kernel.arg_names

    def __getitem__(self, grid):
        return lambda **arguments: _StubCompiled()


class _StubCompiled:
    def __getitem__(self, grid):
        return _no_launch


def _no_launch(*args, stream=None) -> None:
    pass


class _AnyKey(dict):
    """A plan table that hands out one plan for every key (the benchmark's one shape)."""

    def __init__(self, plan):
        super().__init__()
        self.plan = plan

    def get(self, key, default=None):
        return self.plan


def stub_launches(kernel, q, k, v) -> None:
    """Every launch of the forward and the backward a no-op, the plans around them real."""
    package = sys.modules[kernel.__name__]
    launch, plans, forward_plans = package._launch, package._plans, package.forward._forward_plans
    torch.cuda.current_device = lambda: 0
    torch._C._cuda_getCurrentRawStream = lambda device: 0
    launch.flash_attn_triton_fwd = _StubKernel(launch.flash_attn_triton_fwd)
    args, meta = launch.launch_args(q, k, v, True, None)
    forward_plans._FORWARD_PLANS = _AnyKey(forward_plans._Plan(args, meta, q, k, v, True, 0))

    def run_stubbed(table, key, launches, tensors):
        stubbed = lambda: [(_StubKernel(kern), grid, params, options) for kern, grid, params, options in launches()]  # noqa: E731
        plans.run_plan(table, key, stubbed, tensors)

    for strategy in (package.backward._backward, package.backward._backward_single):
        strategy.run_planned = run_stubbed


def steps(kernel, q, k, v, dout) -> dict:
    ops = sys.modules[kernel.__name__]._ops

    class Trivial(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            return torch.empty_like(q)

        @staticmethod
        def backward(ctx, grad):
            return torch.empty_like(grad), torch.empty_like(grad), torch.empty_like(grad)

    scale = q.shape[-1] ** -0.5

    def step_of(forward):
        return lambda: torch.autograd.grad(forward(q, k, v, True, scale, 0, False)[0], (q, k, v), dout)

    return {
        "attention() step": lambda: torch.autograd.grad(kernel.attention(q, k, v, causal=True), (q, k, v), dout),
        "_ops.attend step": step_of(ops.attend),
        "_ops.attend via Function.apply": step_of(ops._Eager.apply),
        "custom op step (eager)": step_of(ops.attention_fwd),
        "attention() forward, no grad": lambda: _no_grad(kernel.attention, q, k, v),
        "trivial Function step": lambda: torch.autograd.grad(Trivial.apply(q, k, v), (q, k, v), dout),
        "C++ node step (torch.add)": lambda: torch.autograd.grad(torch.add(q, k), (q, k), dout),
    }


def _no_grad(attention, q, k, v):
    with torch.no_grad():
        return attention(q, k, v, causal=True)


def best_us(calls: dict, sync=lambda: None, clock=time.perf_counter) -> dict:
    """Best of ROUNDS alternating rounds of CALLS back-to-back calls each, per call; `sync` runs before a
    round starts its clock and after the last (on a GPU: torch.cuda.synchronize, none inside a round)."""
    best = {name: float("inf") for name in calls}
    for fn in calls.values():
        for _ in range(50):
            fn()
    for _ in range(ROUNDS):
        for name, fn in calls.items():
            sync()
            start = clock()
            for _ in range(CALLS):
                fn()
            best[name] = min(best[name], (clock() - start) / CALLS * 1e6)
    sync()
    return best


def gpu_main(kernel) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v, dout = (torch.randn(*SHAPE, device="cuda", dtype=torch.bfloat16, requires_grad=i < 3) for i in range(4))

    def cudnn_step():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return torch.autograd.grad(out, (q, k, v), dout)

    package = sys.modules[kernel.__name__]
    grids = _record_grids(package._prepared_launch)
    rows = {**steps(kernel, q, k, v, dout), "SDPA cuDNN step": cudnn_step}
    ours = rows["attention() step"]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, B1 H2 S128 D64 bf16, best of {ROUNDS} x "
          f"{CALLS}, no synchronisation inside a round")
    for name, us in best_us(rows, torch.cuda.synchronize).items():
        print(f"{name:<30} {us:6.1f} us")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(CALLS):
        ours()
    profile.disable()
    torch.cuda.synchronize()
    launches = _compiled_launches(package._plans)
    taken = sum(grids[id(launch._compiled)][0] is not None for launch in launches)
    print(f"{len(launches)} planned launches ({len(grids)} kernels), {taken} of them prepared (_prepared_launch, "
          f"Triton {package._prepared_launch.triton.__version__})")
    prepared = {id(launch): launch._launch for launch in launches}
    for launch in launches:  # the same plans through Triton's own runner: what the prepared launch saves
        launch._launch = package._prepared_launch.runner_launch(launch._compiled, grids[id(launch._compiled)][1])
    runner = best_us({"attention() step, Triton's runner": ours, "SDPA cuDNN step": cudnn_step},
                     torch.cuda.synchronize)
    for launch in launches:
        launch._launch = lambda args, stream: None
    stubbed = best_us({"attention() step, launches no-op": ours, "SDPA cuDNN step": cudnn_step},
                      torch.cuda.synchronize)
    for name, us in (*runner.items(), *stubbed.items()):
        print(f"{name:<30} {us:6.1f} us")
    for launch in launches:
        launch._launch = prepared[id(launch)]
    pstats.Stats(profile).sort_stats("tottime").print_stats(24)


def _record_grids(prepared_module) -> dict:
    """id(compiled kernel) -> (the prepared launch or None, its grid), for every plan made from here on."""
    grids, prepare = {}, prepared_module.prepared

    def recording(compiled, grid):
        launch = prepare(compiled, grid)
        grids[id(compiled)] = (launch, grid)
        return launch

    prepared_module.prepared = recording
    return grids


def _compiled_launches(plans) -> list:
    with warnings.catch_warnings():  # isinstance on every object touches deprecated torch aliases
        warnings.simplefilter("ignore")
        return [obj for obj in gc.get_objects() if isinstance(obj, plans.CompiledLaunch)]


def main() -> None:
    kernel = import_from_folder()
    if sys.argv[1:] == ["--gpu"]:
        gpu_main(kernel)
        return
    q, k, v, dout = (torch.randn(*SHAPE).half().requires_grad_(i < 3) for i in range(4))
    stub_launches(kernel, q, k, v)
    calls = steps(kernel, q, k, v, dout)
    if sys.argv[1:] == ["--profile"]:
        best_us({"warm-up": calls["attention() step"]})  # first calls import and plan
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(2000):
            calls["attention() step"]()
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)
        return
    print(f"torch {torch.__version__}, launches stubbed, B1 H2 S128 D64 fp16 on CPU, best of {ROUNDS} x {CALLS}")
    for name, us in best_us(calls, clock=time.process_time).items():
        print(f"{name:<30} {us:6.1f} us")


if __name__ == "__main__":
    main()
