"""The prepared launch (_prepared_launch): Triton's C launcher called with the arguments Triton's own runner
would give it. CPU tests replay the installed Triton's `CudaLauncher.__call__` against a recording C
launcher (no GPU: the launcher object is made without compiling anything); GPU tests check that a step's
plans launch that way on the device's Triton and that a launch hook sends them back through the runner."""

from __future__ import annotations

import sys
import types

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from attnprof.kernels import import_from_folder  # noqa: E402

GRID = (7, 2, 1)
METADATA = (4, 1, 1024)  # what CompiledKernel.packed_metadata holds on NVIDIA: warps, CTAs, shared memory


def _prepared_module():
    return sys.modules[import_from_folder().__name__ + "._prepared_launch"]


def _driver():
    return pytest.importorskip("triton.backends.nvidia.driver")


def _launcher(calls: list, scratch_size: int = 0):
    """A CudaLauncher of the installed Triton with a recording C launch, made without compiling one."""
    launcher = object.__new__(_driver().CudaLauncher)
    launcher.__dict__.update(
        launch=lambda *args: calls.append(args), num_ctas=1, global_scratch_size=scratch_size,
        global_scratch_align=128, profile_scratch_size=0, profile_scratch_align=1, launch_cooperative_grid=False,
        launch_pdl=False, gsan_enabled=False)
    if _prepared_module()._version() >= (3, 9):
        launcher.arg_annotations, launcher.kernel_signature = ["annotation"], b"\x01\x02"
    return launcher


class _Compiled(types.SimpleNamespace):
    """A CompiledKernel's fields the prepared launch reads; indexing by a grid gives its runner."""

    def __getitem__(self, grid):
        return self.index(grid)


def _no_runner(grid):
    return lambda *args, stream: None


def _read_here() -> bool:
    return _prepared_module()._version() in ((3, 6), (3, 9))


@pytest.mark.parametrize("scratch_size", [0, 256])
def test_the_prepared_launch_hands_the_c_launcher_what_tritons_own_launcher_does(monkeypatch, scratch_size):
    if not _read_here():
        pytest.skip(f"Triton {triton.__version__}: the prepared launch keeps Triton's runner")
    from contextvars import ContextVar

    from triton.runtime import _allocation

    allocator = lambda size, align, stream: ("scratch", size, align, stream)  # noqa: E731
    monkeypatch.setattr(_allocation, "_allocator", ContextVar("allocator", default=allocator))
    # what 3.9's launcher asks of the active driver without a GPU (profile scratch: none is needed)
    monkeypatch.setattr(triton.runtime.driver, "_active", types.SimpleNamespace(
        allocate_default_profile_scratch=lambda size, align, stream: None))
    prepared = _prepared_module()
    calls: list = []
    launcher = _launcher(calls, scratch_size)
    args = [0x7F0000, 5, 0x7F1000, 64, None]
    # Triton's own path, hooks off as the prepared launch passes them: CompiledKernel's runner calls this
    type(launcher).__call__(launcher, *GRID, 99, 4242, METADATA, None, None, None, *args)
    launch = prepared.prepared(_Compiled(run=launcher, function=4242, packed_metadata=METADATA, index=_no_runner), GRID)
    launch(args, 99)
    assert len(calls) == 2 and calls[0] == calls[1]
    scratch = ("scratch", 7 * 2 * scratch_size, 128, 99) if scratch_size else None
    assert scratch in calls[1]


def test_a_launch_hook_sends_every_launch_through_tritons_runner(monkeypatch):
    if not _read_here():
        pytest.skip(f"Triton {triton.__version__}: the prepared launch keeps Triton's runner")
    from triton import knobs

    prepared = _prepared_module()
    calls, runner_calls = [], []
    compiled = _Compiled(run=_launcher(calls), function=4242, packed_metadata=METADATA,
                         index=lambda grid: lambda *args, stream: runner_calls.append((grid, args, stream)))
    launch = prepared.prepared(compiled, GRID)
    hook = lambda metadata: None  # noqa: E731
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        launch([1, 2], 99)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    launch([3, 4], 99)
    assert runner_calls == [(GRID, (1, 2), 99)] and len(calls) == 1


@pytest.mark.parametrize("change", ["version", "launcher", "profile scratch", "gsan"])
def test_a_triton_or_kernel_the_prepared_launch_does_not_know_keeps_the_runner(monkeypatch, change):
    prepared = _prepared_module()
    launcher = _launcher([])
    if change == "version":
        monkeypatch.setattr(prepared, "_version", lambda: (3, 7))
    elif change == "launcher":
        launcher = types.SimpleNamespace(**launcher.__dict__)  # same fields, not Triton's CUDA launcher
    elif change == "profile scratch":
        launcher.profile_scratch_size = 64
    else:
        launcher.gsan_enabled = True
    compiled = _Compiled(run=launcher, function=1, packed_metadata=METADATA, index=_no_runner)
    assert prepared.prepared(compiled, GRID) is None


def _step(module, q, k, v, dout):
    out = module.attention(q, k, v, causal=True)
    return (out, *torch.autograd.grad(out, (q, k, v), dout))


@pytest.mark.cuda
# the plain forward (device-made TMA descriptors); the Gluon one (2^35 FLOPs: where a training step takes it)
@pytest.mark.parametrize("shape", [(2, 4, 320, 64), (16, 16, 1024, 64)])
def test_a_steps_plans_launch_without_tritons_runner_and_a_hook_brings_it_back(monkeypatch, shape):
    from triton import knobs

    module = import_from_folder()
    gen = torch.Generator().manual_seed(3)
    q, k, v, dout = (torch.randn(shape, generator=gen).to(torch.bfloat16).cuda().requires_grad_(i < 3)
                     for i in range(4))
    first = _step(module, q, k, v, dout)  # makes the plans (through the JIT)
    launcher_class = _driver().CudaLauncher
    real_call = launcher_class.__call__

    def no_runner(*args, **kwargs):
        raise AssertionError("a planned launch went through Triton's runner")

    monkeypatch.setattr(launcher_class, "__call__", no_runner)
    prepared = _step(module, q, k, v, dout)
    monkeypatch.setattr(launcher_class, "__call__", real_call)
    seen = []
    hook = lambda metadata: seen.append(metadata.get()["name"])  # noqa: E731
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        hooked = _step(module, q, k, v, dout)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert len(seen) == 4  # forward, delta, dK/dV, dQ: every one through the runner, which calls the hook
    for a, b, c in zip(first, prepared, hooked, strict=True):
        assert torch.equal(a, b) and torch.equal(a, c)
