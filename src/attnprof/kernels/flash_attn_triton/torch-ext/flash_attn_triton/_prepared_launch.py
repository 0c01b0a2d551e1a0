"""A compiled kernel launched straight through Triton's C launcher, with what is fixed per plan prepared once.

`CompiledKernel[grid](*args)`, the runner a plan kept before, does per launch in Python: a closure call, a
launch-metadata dict for the launch hooks, a property and three knob lookups, `CudaLauncher.__call__` with two
nested scratch allocators, and it hands the C launcher the hook chain, which C then calls twice although it
is empty; the C launcher calls `data_ptr()` and `cuPointerGetAttribute` for every tensor. Where no launch hook
is installed (a profiler such as Proton installs one) none of that changes what runs: here the grid, the
function, the packed metadata and the cooperative/PDL flags are bound when the plan is made, the hooks are
None, the tensors go as their addresses, and a call is one call of the C launcher (plus the scratch allocator's
where the kernel makes TMA descriptors on the device).

The C launcher's arguments are Triton's internals and changed between versions: read here for 3.6 (a launcher
compiled per signature, the kernel's arguments spread after the base ones) and 3.9 (one generic launcher, the
arguments as a tuple with the signature's annotations). Any other version, another backend, a kernel that needs
profile scratch, GSan, or an installed launch hook keeps Triton's own runner.
"""

from __future__ import annotations

from collections.abc import Callable

import triton

try:
    from triton import knobs
except ImportError:  # a Triton older than the launch-hook knobs: never prepared (prepared() reads the version)
    knobs = None

Launch = Callable[[list, int], None]  # (every kernel argument in order, the raw CUDA stream) -> None


def _version() -> tuple[int, int]:
    major, minor = triton.__version__.split(".")[:2]
    return int(major), int(minor)


def hooked() -> bool:
    """Whether a launch hook is installed: then every launch goes through Triton's runner, which builds the
    metadata the hook reads. A hook knob is a chain of hooks (empty unless one was added), a plain function,
    or None; read on every launch, since a profiler may add one at any time."""
    runtime = knobs.runtime
    enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
    return bool(getattr(enter, "calls", enter) or getattr(leave, "calls", leave))


def runner_launch(compiled, grid: tuple[int, int, int]) -> Launch:
    """Triton's own runner for `compiled` on `grid`: what every launch went through before, and the fallback."""
    runner = compiled[grid]
    return lambda args, stream: runner(*args, stream=stream)


def prepared(compiled, grid: tuple[int, int, int]) -> Launch | None:
    """The direct launch of `compiled` on `grid` for this Triton, or None where it is not one read here."""
    launcher = getattr(compiled, "run", None)
    if type(launcher).__name__ != "CudaLauncher" or getattr(launcher, "gsan_enabled", False):
        return None
    if launcher.profile_scratch_size:
        return None
    form = {(3, 6): _spread_arguments, (3, 9): _annotated_arguments}.get(_version())
    if form is None or (form is _annotated_arguments) != hasattr(launcher, "kernel_signature"):
        return None
    fallback = runner_launch(compiled, grid)
    return form(launcher, compiled.function, compiled.packed_metadata, grid, _scratch(launcher, grid), fallback)


def _scratch(launcher, grid: tuple[int, int, int]) -> Callable[[int], object] | None:
    """The kernel's global scratch per launch (where its programs write TMA descriptors made on the device),
    from Triton's allocator, sized as CudaLauncher does; None when the kernel needs none."""
    if not launcher.global_scratch_size:
        return None
    from triton.runtime import _allocation

    size = grid[0] * grid[1] * grid[2] * launcher.num_ctas * launcher.global_scratch_size
    align = launcher.global_scratch_align
    return lambda stream: _allocation._allocator.get()(size, align, stream)


def _spread_arguments(launcher, function, metadata, grid, scratch, fallback) -> Launch:
    """Triton 3.6: launch(gridX, gridY, gridZ, stream, function, cooperative, pdl, global scratch, profile
    scratch, metadata, launch metadata, enter hook, exit hook, *kernel arguments)."""
    c_launch, (x, y, z) = launcher.launch, grid
    cooperative, pdl = launcher.launch_cooperative_grid, launcher.launch_pdl

    def launch(args: list, stream: int) -> None:
        if hooked():
            return fallback(args, stream)
        c_launch(x, y, z, stream, function, cooperative, pdl, scratch(stream) if scratch else None, None, metadata,
                 None, None, None, *args)
    return launch


def _annotated_arguments(launcher, function, metadata, grid, scratch, fallback) -> Launch:
    """Triton 3.9: launch(gridX, gridY, gridZ, stream, function, cooperative, pdl, metadata, launch metadata,
    enter hook, exit hook, global scratch, profile scratch, annotations, signature, kernel arguments)."""
    c_launch, (x, y, z) = launcher.launch, grid
    cooperative, pdl = launcher.launch_cooperative_grid, launcher.launch_pdl
    annotations, signature = launcher.arg_annotations, launcher.kernel_signature

    def launch(args: list, stream: int) -> None:
        if hooked():
            return fallback(args, stream)
        c_launch(x, y, z, stream, function, cooperative, pdl, metadata, None, None, None,
                 scratch(stream) if scratch else None, None, annotations, signature, tuple(args))
    return launch
