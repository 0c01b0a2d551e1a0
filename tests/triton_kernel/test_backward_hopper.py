"""The Gluon backward (_backward_hopper.py, the default on sm_90 for large contiguous inputs) without a GPU:
it compiles for sm_90 warp-specialised with wgmma and the TMA reduce-add, fits in shared memory, and takes
only the inputs it is written for (everything else, the interpreter included, runs another backward)."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnprof.kernels import import_from_folder  # noqa: E402

SHARED_MEMORY_PER_BLOCK = 232448  # an H100/H200 block's limit (227 KiB)


def _module(name: str):
    return sys.modules[import_from_folder().__name__ + "." + name]


@pytest.mark.parametrize("head_dim, causal", [(128, True), (64, False)])
def test_the_gluon_backward_compiles_for_sm90_warp_specialised_with_a_tma_reduce_of_dq(head_dim, causal):
    pytest.importorskip("triton.experimental.gluon.nvidia.hopper")
    kernel = _module("backward._backward_hopper_launch").compile_for_sm90(head_dim, causal, "bf16", group=2)
    ptx = kernel.asm["ptx"]
    assert kernel.metadata.shared <= SHARED_MEMORY_PER_BLOCK
    assert kernel.metadata.num_warps == 12  # two consumer warpgroups, one of the producer and dQ-writer warps
    assert ptx.count("wgmma.mma_async") >= 10  # S^T, dP^T, dV, dK, dQ in each consumer
    assert "setmaxnreg.inc.sync.aligned.u32 \t240" in ptx and "setmaxnreg.dec.sync.aligned.u32 \t24" in ptx
    assert "cp.reduce.async.bulk.tensor" in ptx and ".add" in ptx  # dQ by TMA reduce-add, not atomics
    assert "atom.global" not in ptx and "red.global" not in ptx


def test_only_sm90_self_attention_in_whole_key_blocks_goes_to_the_gluon_backward():
    unsupported = _module("backward._backward_hopper_launch").unsupported
    q, ragged, longer = (torch.empty(1, 2, n, 128, dtype=torch.bfloat16) for n in (1024, 1000, 1152))
    assert "multiple of 128" in unsupported(ragged, ragged, causal=False, causal_off=0)
    assert "as many queries as keys" in unsupported(q, longer, causal=False, causal_off=0)
    assert "top-left" in unsupported(q, q, causal=True, causal_off=128)
    assert "sm_90" in unsupported(q, q, causal=True, causal_off=0)  # a CPU tensor


@pytest.mark.parametrize("launch", ["forward._hopper_launch", "backward._backward_hopper_launch"])
def test_on_an_sm90_card_each_gluon_kernel_is_available_where_triton_has_gluon(monkeypatch, launch):
    """What an H100 or H200 sees once shape and device pass: no reason left. Each launch module asks for its kernel
    module by name; the backward once named it relative to forward/, so every GPU fell back to the two-pass backward
    (0.77x cuDNN on an H100) with no warning."""
    pytest.importorskip("triton.experimental.gluon.nvidia.hopper")
    from types import SimpleNamespace

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    q = SimpleNamespace(shape=(4, 16, 4096, 128), is_cuda=True, device="cuda:0")  # 2^38 FLOPs: every table's size
    assert _module(launch).unsupported(q, q, causal=False, causal_off=0) is None


def test_the_variable_or_the_default_picks_the_gluon_kernel(monkeypatch):
    launch = _module("backward._backward_hopper_launch")
    monkeypatch.setattr(launch, "unsupported", lambda *args: None)  # as on an H200
    small, large = (torch.empty(1, 16, n, 128, dtype=torch.bfloat16) for n in (1024, 8192))
    for value, want in (("gluon", True), ("1", False), ("0", False)):
        monkeypatch.setenv("FLASH_ATTN_TRITON_ATOMIC_DQ", value)
        assert launch.chosen(small, small, small, small, small, True, 0) is want
    monkeypatch.delenv("FLASH_ATTN_TRITON_ATOMIC_DQ")
    assert launch.chosen(large, large, large, large, large, True, 0) is True
    assert launch.chosen(small, small, small, small, small, True, 0) is False  # under DEFAULT_FROM_FLOPS
    strided = large.transpose(1, 2).contiguous().transpose(1, 2)  # [B, S, H, D] memory: read in place elsewhere
    assert launch.chosen(large, large, large, strided, large, True, 0) is False


def test_the_gluon_backwards_plan_replaces_every_tensor_and_descriptor_of_its_first_call(monkeypatch):
    """A plan that kept the first call's output held that step's autograd graph and its leaves' AccumulateGrad
    nodes, which refuses CUDA graph capture of later steps on those leaves (docs/kernel.md, "The train run's
    1.17 ms"): every tensor a launch takes, directly or through a descriptor, is one later calls replace."""
    pytest.importorskip("triton.experimental.gluon.nvidia.hopper")
    launch = _module("backward._backward_hopper_launch")
    made = []
    monkeypatch.setattr(launch, "CompiledLaunch", lambda kernel, grid, params, options, replaced=(): made.append(
        (params, replaced)))
    q = torch.empty(1, 2, 128, 64, dtype=torch.bfloat16)
    tensors = {name: torch.empty_like(q) for name in ("Q", "K", "Out", "dOut", "dQ", "dK", "dV")}
    tensors.update(dQacc=q.float(), Delta=torch.empty(1, 2, 128))
    tensors.update(launch.descriptors(q, q, q, q, tensors["dQacc"], torch.empty(1, 2, 128), tensors["Delta"]),
                   Locks=torch.zeros(4, dtype=torch.int32))
    assert sorted(launch.DESCRIPTORS) == sorted(name for name in tensors if name.startswith("desc_"))
    for deterministic in (False, True):
        launch._launches(tensors, sm_scale=0.125, bounds=(128, 0), deterministic=deterministic)
    assert len(made) == 6
    assert "Locks" in made[4][1] and made[1][0]["Locks"] is None  # the deterministic kernel's alone
    for params, replaced in made:
        holding = {name for name, value in params.items()
                   if isinstance(value, torch.Tensor) or isinstance(getattr(value, "base", None), torch.Tensor)}
        assert holding and holding <= set(replaced)


def test_the_band_bounds_a_window_by_the_sequence_and_writes_causal_as_one():
    band = _module("backward._backward_hopper_launch").band
    assert band(2048, causal=True, window=None) == (2048, 0)
    assert band(2048, causal=False, window=None) is None
    assert band(2048, causal=False, window=(255, 0)) == (255, 0)
    assert band(2048, causal=False, window=(1 << 30, 1 << 30)) == (2048, 2048)  # "no limit" (flash_api.UNBOUNDED)


def test_a_masked_call_over_one_contiguous_sequence_goes_to_the_gluon_backward(monkeypatch):
    masked = _module("backward.masked_backward")
    monkeypatch.setattr(masked._backward_hopper_launch, "unsupported", lambda *args: None)  # as on an H200
    monkeypatch.delenv("FLASH_ATTN_TRITON_ATOMIC_DQ", raising=False)
    q, kv = (torch.empty(1, heads, 1024, 128).transpose(1, 2) for heads in (4, 2))  # [B, S, H, D] views
    inputs = (q, kv, kv, q, q)

    def takes(inputs, sequences=1, max_q=1024, max_k=1024):  # a fresh key: no cached answer
        return masked.gluon_takes(inputs, sequences, max_q, max_k, key=object())

    assert takes(inputs)
    assert not takes(inputs, sequences=2)  # documents, a packed batch
    assert not takes(inputs, max_q=1000)  # a sequence shorter than its tensor
    assert not takes((torch.empty(1, 1024, 4, 128), *inputs[1:]))  # [B, S, H, D] memory: the Triton passes
    for value, want in (("gluon", True), ("", True), ("0", False), ("1", False)):
        monkeypatch.setenv("FLASH_ATTN_TRITON_ATOMIC_DQ", value)
        assert takes(inputs) is want


def test_a_planned_call_reuses_the_last_descriptors_where_every_address_is_the_same():
    """They are made over Address, so that the kept ones hold no tensor (a step's memory and autograd graph)."""
    pytest.importorskip("triton.experimental.gluon.nvidia.hopper")
    launch = _module("backward._backward_hopper_launch")
    q = torch.empty(1, 2, 128, 64, dtype=torch.bfloat16)
    lse = torch.empty(1, 2, 128)
    tensors = [q, q.clone(), q.clone(), q.clone(), q.float(), lse, lse.clone()]
    key = object()
    first = launch.reused_descriptors(key, tuple(tensors))
    assert launch.reused_descriptors(key, tuple(tensors)) is first
    assert all(type(d.base) is launch.Address for d in first.values())
    assert first["desc_k"].base.data_ptr() == tensors[1].data_ptr() and first["desc_k"].shape == [256, 64]
    tensors[3] = q.clone()  # another dO
    again = launch.reused_descriptors(key, tuple(tensors))
    assert again is not first and again["desc_do"].base.data_ptr() == tensors[3].data_ptr()


@pytest.mark.parametrize("call", ["flash_attn_func", "flash_attn_varlen_func", "masked_attention"])
def test_the_deterministic_keyword_of_a_masked_call_reaches_its_backward(monkeypatch, call):
    """Not only torch.use_deterministic_algorithms: a window's backward may run the Gluon kernel, whose dQ adds
    are in a fixed order only when asked (before, the keyword stopped at the masked path's door)."""
    module = import_from_folder()
    masked = _module("backward.masked_backward")
    seen = []
    monkeypatch.setattr(masked, "masked_forward", lambda q, k, v, *a, **kw: (q * 1, q.new_zeros(
        q.shape[0], q.shape[2], q.shape[1]).float()))
    monkeypatch.setattr(masked, "masked_backward", lambda q, k, v, *a, deterministic, **kw: seen.append(
        deterministic) or (torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)))
    q, k, v = (torch.randn(1, 64, 2, 64, dtype=torch.float16, requires_grad=True) for _ in range(3))
    for deterministic in (False, True):
        if call == "flash_attn_func":
            out = module.flash_attn_func(q, k, v, window_size=(8, 0), deterministic=deterministic)
        elif call == "flash_attn_varlen_func":
            cu = torch.tensor([0, 64], dtype=torch.int32)
            out = module.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 64, 64, window_size=(8, 0),
                                                deterministic=deterministic)
        else:
            out = module.masked_attention(*(t.transpose(1, 2) for t in (q, k, v)), window_size=(8, 0),
                                          deterministic=deterministic)
        out.sum().backward()
    assert seen == [False, True]
