"""Cheap launches: what depends only on the shape is worked out once per shape and dtype, not per call.

A JIT launch (`kernel[grid](...)`) binds every argument, specialises each integer and pointer, hashes
that into a cache key and looks the compiled kernel up: tens of microseconds of Python per launch,
which at the article's problem (B8 H16 S1024 D64) is more than the GPU's work. Here the first call of a
shape goes through the JIT (which compiles or finds the kernel on disk and runs it), and keeps the
compiled kernel, its grid and every argument that is not a tensor; later calls of that shape pass only
the new tensors, straight to Triton's C launcher (_prepared_launch: what Triton's own runner adds around
it is prepared once per plan). The choice of kernel and configuration, the checks and the grid are in
the plan too, so a call does one dict lookup and its allocations.

Triton specialises pointers on 16-byte alignment: a plan is made, and looked up, separately for aligned
and unaligned tensors. Integers (lengths, heads, the causal offset) are part of the shape key.
"""

from __future__ import annotations

import torch

from . import _prepared_launch


class CompiledLaunch:
    """One Triton (or Gluon) kernel compiled for one shape, launched through Triton's C launcher.

    Made by its first launch, through the JIT: `params` are every argument of the kernel by name
    (tensors included: those are replaced on later calls), `options` the launch options (num_warps...).
    Later launches call the C launcher with the rest prepared (_prepared_launch), or Triton's runner where
    that is not available. `replaced`: the parameters every later call passes to run();
    the first call's values of those are not kept, so a plan does not hold that call's tensors (its inputs,
    outputs and gradients: 128 MiB at the article's problem) for the life of the process. A tensor passed
    where the first call passed one goes to the launcher as its address (no cuPointerGetAttribute per launch).
    """

    def __init__(self, kernel, grid: tuple[int, ...], params: dict, options: dict, replaced: tuple[str, ...] = ()):
        self._compiled = compiled = kernel[grid](**params, **options)  # kept: its module unloads with it
        grid = tuple(grid) + (1,) * (3 - len(grid))  # the launcher reads all three dimensions
        self._launch = _prepared_launch.prepared(compiled, grid) or _prepared_launch.runner_launch(compiled, grid)
        # every argument in the kernel's order, but those each call replaces
        self._args = [None if name in replaced else params[name] for name in kernel.arg_names]
        index = {name: i for i, name in enumerate(kernel.arg_names)}
        # what run() replaces: (where, name, whether the first call passed a tensor there)
        self._slots = tuple((index[name], name, isinstance(params[name], torch.Tensor)) for name in replaced)
        self._device = torch.cuda.current_device()

    def run(self, tensors: dict) -> None:
        """Launch with tensors[name] for each name `replaced` named: a plan's later call, which looks up only
        what this kernel takes (a step's three backward passes take 8-10 of 11 tensors each)."""
        args = self._args.copy()
        for position, name, pointer in self._slots:
            value = tensors[name]
            args[position] = value.data_ptr() if pointer and value is not None else value
        self._launch(args, torch._C._cuda_getCurrentRawStream(self._device))


def aligned(*tensors: torch.Tensor) -> bool:
    return all(t.data_ptr() % 16 == 0 for t in tensors)


def run_planned(plans: dict, key, launches, tensors: dict) -> None:
    """Run a sequence of launches with these tensors (by parameter name): under the interpreter (CPU
    tensors) through the JIT; on a GPU through the plan kept for `key` (run_plan).
    `launches()` gives each launch's (kernel, grid, arguments other than tensors, options)."""
    if not tensors["Q"].is_cuda:
        for kernel, grid, params, options in launches():
            kernel[grid](**_own(kernel, tensors), **params, **options)
        return
    run_plan(plans, key, launches, tensors)


def run_plan(plans: dict, key, launches, tensors: dict) -> None:
    """run_planned's GPU half: the plan kept for `key`, made by the key's first call, which compiles (or
    loads) and runs each launch through the JIT; later calls hand each compiled runner its tensors. A
    call site passes the same tensor names on every call."""
    plan = plans.get(key)
    if plan is None:
        made = []
        for kernel, grid, params, options in launches():
            own = _own(kernel, tensors)
            made.append(CompiledLaunch(kernel, grid, {**own, **params}, options, replaced=tuple(own)))
        plans[key] = made  # kept once every launch compiled and ran
        return
    for launch in plan:
        launch.run(tensors)


def _own(kernel, tensors: dict) -> dict:
    """The tensors a kernel takes, by its parameter names."""
    return {name: tensors[name] for name in kernel.arg_names if name in tensors}
