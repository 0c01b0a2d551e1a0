"""The compiled-runner launch of _plans, on CPU with a stand-in kernel: the first launch goes through the
JIT with every argument, later ones hand the runner all arguments in the kernel's order with the new
tensors, on a three-dimensional grid (the runner reads grid[0..2]; a 1-D grid once failed on the H200)."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnprof.kernels import import_from_folder  # noqa: E402


class StandInKernel:
    arg_names = ["Q", "Out", "n", "BLOCK"]

    def __init__(self):
        self.jit_calls, self.runner_calls, self.runner_grids = [], [], []

    def __getitem__(self, grid):
        def jit_launch(**kwargs):
            self.jit_calls.append((grid, kwargs))
            return self  # the JIT returns the compiled kernel, indexable by a grid

        return jit_launch if not self.jit_calls else self._runner(grid)

    def _runner(self, grid):
        self.runner_grids.append(grid)
        return lambda *args, stream: self.runner_calls.append((args, stream))


def test_later_calls_pass_every_argument_in_order_with_the_new_tensors_on_a_3d_grid(monkeypatch):
    plans = sys.modules[import_from_folder().__name__ + "._plans"]
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 1234, raising=False)
    kernel = StandInKernel()
    launch = plans.CompiledLaunch(kernel, (7,), {"Q": "q0", "Out": "o0", "n": 5, "BLOCK": 64}, {"num_warps": 4},
                                  replaced=("Q", "Out"))
    assert kernel.jit_calls == [((7,), {"Q": "q0", "Out": "o0", "n": 5, "BLOCK": 64, "num_warps": 4})]
    assert kernel.runner_grids == [(7, 1, 1)]
    launch.run({"Q": "q1", "Out": "o1", "Unused": "x"})
    assert kernel.runner_calls == [(("q1", "o1", 5, 64), 1234)]


def test_alignment_is_read_off_the_pointers():
    plans = sys.modules[import_from_folder().__name__ + "._plans"]
    t = torch.empty(64, dtype=torch.float16)
    assert plans.aligned(t) and not plans.aligned(t[1:])


def test_the_descriptor_scratch_is_kept_per_stream_grown_when_short_and_fresh_under_capture(monkeypatch):
    launch = sys.modules[import_from_folder().__name__ + "._launch"]
    monkeypatch.setattr(launch, "_SCRATCH", {})
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    cpu_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda size, dtype, device: cpu_empty(size, dtype=dtype))
    first = launch._scratch(128, 128, 7)
    assert launch._scratch(64, 128, 7) is first
    grown = launch._scratch(256, 128, 7)
    assert grown is not first and grown.numel() == 256
    assert launch._scratch(64, 128, 8) is not grown  # another stream: its own buffer
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert launch._scratch(64, 128, 7) is not grown


def test_a_plan_keeps_no_tensor_of_its_first_call_that_later_calls_replace(monkeypatch):
    """The first call's inputs, outputs and gradients would otherwise live as long as the plan."""
    import weakref

    plans = sys.modules[import_from_folder().__name__ + "._plans"]
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 1234, raising=False)
    kernel = StandInKernel()
    first_q, first_out = torch.empty(4), torch.empty(4)
    gone = [weakref.ref(first_q), weakref.ref(first_out)]
    launch = plans.CompiledLaunch(kernel, (7,), {"Q": first_q, "Out": first_out, "n": 5, "BLOCK": 64}, {},
                                  replaced=("Q", "Out"))
    del first_q, first_out
    kernel.jit_calls.clear()  # the stand-in's record of the JIT call held them too
    assert [ref() for ref in gone] == [None, None]
    q, out = torch.empty(4), torch.empty(4)
    launch.run({"Q": q, "Out": out, "dQ": "unused"})
    # tensors go to the launcher as their addresses (Triton's C launcher would look each pointer up again)
    assert kernel.runner_calls == [((q.data_ptr(), out.data_ptr(), 5, 64), 1234)]


def test_the_gluon_forwards_plan_keeps_no_tensor_of_its_first_call(monkeypatch):
    """Its descriptor templates held the first call's q, k, v and output, and through the output (the autograd
    Function's result) that step's graph with the leaves' AccumulateGrad nodes: later steps on those leaves met
    nodes made on the first call's stream, and `attnprof run --mode train` could not capture any variant's step
    in a CUDA graph (docs/kernel.md, "The train run's 1.17 ms")."""
    import types
    import weakref

    package = import_from_folder().__name__
    forward_plans, hopper = (sys.modules[f"{package}.forward.{name}"] for name in ("_forward_plans", "_hopper_launch"))
    firsts = {name: torch.empty(4) for name in hopper.DESCRIPTOR_OF}
    gone = [weakref.ref(t) for t in firsts.values()]
    descriptors = {desc: types.SimpleNamespace(base=firsts[name], shape=[4, 1], strides=[1, 1], padding="zero")
                   for name, desc in hopper.DESCRIPTOR_OF.items()}
    launched, handed = [], [descriptors]
    monkeypatch.setattr(hopper, "unsupported", lambda *args: None)
    monkeypatch.setattr(hopper, "first_launch", lambda args, meta, group: (types.SimpleNamespace(run=launched.append),
                                                                           handed.pop()))
    monkeypatch.setattr(forward_plans._launch, "launch_head_group", lambda args, meta: 1)
    later = forward_plans._launcher({}, {}, None, None, True, 0)
    del firsts, descriptors
    assert [ref() for ref in gone] == [None] * 4
    q, k, v, out, lse = (torch.empty(4) for _ in range(5))
    later(q, k, v, out, lse)
    assert launched[0]["LSE"] is lse and launched[0]["desc_q"].base is q and launched[0]["desc_o"].base is out
    assert launched[0]["desc_k"].shape == [4, 1] and launched[0]["desc_v"].padding == "zero"


def test_a_training_steps_forward_at_the_articles_size_is_the_plain_kernel(monkeypatch):
    """At 2^34 FLOPs (the article's B8 H16 S1024 D64 causal) a forward alone takes the Gluon forward, a training
    step's the plain one (its step was faster on the H200: _hopper_launch.TRAINING_LEAST); from 2^35 both take
    Gluon. The eager autograd path asks for the training plan, a call without gradients for the other."""
    package = import_from_folder()
    hopper, ops = (sys.modules[package.__name__ + name] for name in (".forward._hopper_launch", "._ops"))
    article, twice = torch.empty(8, 16, 1024, 64, device="meta"), torch.empty(16, 16, 1024, 64, device="meta")
    assert "sm_90" in hopper.unsupported(article, article, True, 0)  # passed the size gate: refused for its device
    assert "TRAINING_LEAST" in hopper.unsupported(article, article, True, 0, training=True)
    assert "sm_90" in hopper.unsupported(twice, twice, True, 0, training=True)
    asked = []

    def planned(q, k, v, **kwargs):
        asked.append(kwargs.get("training", False))
        return q * 1, q.new_zeros(q.shape[:3]), None

    monkeypatch.setattr(ops, "planned_forward", planned)
    monkeypatch.setattr(ops, "forward", lambda q, k, v, **kwargs: asked.append("forward") or planned(q, k, v)[:2])
    q = torch.randn(1, 2, 16, 64, requires_grad=True)
    ops.attend(q, q, q, True, 0.125, 0)
    with torch.no_grad():
        ops.attend(q, q, q, True, 0.125, 0)
    assert asked == [True, "forward", False]  # without gradients: forward(), whose plan is not the training one
