"""On a GPU: the Triton backward's gradients against float64 next to cuDNN's, torch.compile(fullgraph=True)
with inductor on a module calling the kernel, and a CUDA graph capturing a forward and backward."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnprof.kernels import import_from_folder  # noqa: E402

pytestmark = pytest.mark.cuda


def _inputs(batch, heads, kv_heads, seq, head_dim, dtype, seed=4):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, seq, head_dim, generator=gen).to(dtype).cuda()
    k, v = (torch.randn(batch, kv_heads, seq, head_dim, generator=gen).to(dtype).cuda() for _ in range(2))
    return q, k, v, torch.randn(q.shape, generator=gen).to(dtype).cuda()


def _grads(attend, q, k, v, dout):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    return torch.autograd.grad(attend(*leaves), leaves, dout)


# the two-pass backward, the single pass (atomic dQ), the Gluon kernel where it applies
@pytest.mark.parametrize("atomic_dq", ["0", "1", "gluon"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("batch, heads, kv_heads, seq, head_dim", [
    (2, 4, 4, 1024, 128), (1, 8, 2, 512, 64), (1, 4, 4, 1000, 128),  # Gluon forward; GQA; ragged (plain)
    (2, 6, 2, 333, 64)])  # GQA 3/1, ragged: the single pass's TMA reduce adds zero rows across heads
def test_gradients_are_no_worse_than_cudnns_against_float64(monkeypatch, atomic_dq, causal, dtype, batch, heads,
                                                            kv_heads, seq, head_dim):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    monkeypatch.setenv("FLASH_ATTN_TRITON_ATOMIC_DQ", atomic_dq)

    module = import_from_folder()
    q, k, v, dout = _inputs(batch, heads, kv_heads, seq, head_dim, dtype)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    want = _grads(lambda *t: sdpa(*t, is_causal=causal, enable_gqa=True), *(t.double() for t in (q, k, v, dout)))
    calls = _recording_gluon(monkeypatch, module)
    ours = _grads(lambda *t: module.attention(*t, causal=causal), q, k, v, dout)
    if atomic_dq == "gluon" and seq % 128 == 0 and torch.cuda.get_device_capability() == (9, 0):
        assert calls and calls[-1][1]  # the Gluon backward ran, not a silent fallback
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        theirs = _grads(lambda *t: sdpa(*t, is_causal=causal, enable_gqa=True), q, k, v, dout)
    for name, o, t, w in zip(("dq", "dk", "dv"), ours, theirs, want, strict=True):
        assert o.shape == w.shape and o.dtype == dtype, name
        error, library = ((x.double() - w).abs().max().item() for x in (o, t))
        assert error <= 1.5 * library + 1e-4, (name, error, library)


def test_torch_compile_fullgraph_with_inductor_traces_a_module_calling_it():
    module = import_from_folder()

    class Block(torch.nn.Module):
        def forward(self, q, k, v):
            return module.attention(torch.nn.functional.silu(q), k, v, causal=True).float().square().sum()

    q, k, v, _ = _inputs(1, 4, 2, 256, 64, torch.bfloat16)
    eager, compiled = (_grads(lambda *t, m=m: m(*t), q, k, v, torch.ones((), device="cuda"))
                       for m in (Block(), torch.compile(Block(), fullgraph=True)))
    for a, b in zip(eager, compiled, strict=True):
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)


def test_a_cuda_graph_captures_a_forward_and_backward_and_replays_them():
    module = import_from_folder()
    q, k, v, dout = (t.requires_grad_(i < 3) for i, t in enumerate(_inputs(1, 4, 4, 384, 128, torch.bfloat16)))

    def step():
        return torch.autograd.grad(module.attention(q, k, v, causal=True), (q, k, v), dout)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        eager = step()  # warm-up (compiles) off the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    with torch.no_grad():
        q.mul_(0.5)
    graph.replay()
    for got, want in zip(captured, step(), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert not all(torch.equal(a, b) for a, b in zip(captured, eager, strict=True))


@pytest.mark.parametrize("atomic_dq", ["0", "1", "gluon"])
def test_a_second_call_of_a_shape_goes_through_its_plan_and_never_through_the_jit(monkeypatch, atomic_dq):
    import triton.runtime.jit as jit

    monkeypatch.setenv("FLASH_ATTN_TRITON_ATOMIC_DQ", atomic_dq)
    module = import_from_folder()
    seq = 384 if atomic_dq.startswith("gluon") else 320  # the Gluon backward takes whole 128-key blocks only
    q, k, v, dout = _inputs(2, 4, 2, seq, 64, torch.bfloat16, seed=9)
    attend = lambda *t: module.attention(*t, causal=True)  # noqa: E731
    first = (module.attention(q, k, v, causal=True), *_grads(attend, q, k, v, dout))

    def no_jit(*args, **kwargs):
        raise AssertionError("a JIT launch for a shape that has a plan")

    monkeypatch.setattr(jit.JITFunction, "run", no_jit)
    second = (module.attention(q, k, v, causal=True), *_grads(attend, q, k, v, dout))
    for a, b in zip(first, second, strict=True):
        if atomic_dq == "0":
            assert torch.equal(a, b)  # every pass of the two-pass backward is deterministic
        else:  # atomic dQ: the order of the float32 additions may change the last bits
            torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2)


def _recording_gluon(monkeypatch, module) -> list:
    """Each call of the Gluon backward: (its deterministic keyword, whether it ran: None is a fallback)."""
    launch = module.backward._backward_hopper_launch
    gluon_backward, calls = launch.backward, []

    def recorded(*args, **kwargs):
        grads = gluon_backward(*args, **kwargs)
        calls.append((kwargs.get("deterministic", False), grads is not None))
        return grads

    monkeypatch.setattr(launch, "backward", recorded)
    return calls


@pytest.mark.parametrize("batch, heads, kv_heads, seq, head_dim, causal", [
    (2, 8, 2, 2048, 128, True), (2, 4, 4, 1024, 64, False),
    (1, 2, 1, 32768, 128, True)])  # 512 programs: more than fit at once, each waits only on earlier ones
def test_a_deterministic_request_gives_the_gluon_backwards_gradients_the_same_bits_every_run(
        monkeypatch, batch, heads, kv_heads, seq, head_dim, causal):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the Gluon backward is sm_90's")
    monkeypatch.setenv("FLASH_ATTN_TRITON_ATOMIC_DQ", "gluon")  # wherever it applies, small problems too
    module = import_from_folder()
    q, k, v, dout = _inputs(batch, heads, kv_heads, seq, head_dim, torch.bfloat16, seed=11)
    calls = _recording_gluon(monkeypatch, module)
    runs = [_grads(lambda *t: module.attention(*t, causal=causal, deterministic=True), q, k, v, dout)
            for _ in range(3)]
    assert calls == [(True, True)] * 3  # the fixed-order Gluon kernel ran each time, no fallback
    for run in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], run, strict=True))
    fast = _grads(lambda *t: module.attention(*t, causal=causal), q, k, v, dout)  # the same sums, in any order
    for fixed, free in zip(runs[0], fast, strict=True):
        torch.testing.assert_close(fixed, free, rtol=2e-2, atol=2e-2)
    if seq <= 2048:  # a float64 reference of 32k x 32k scores would not fit
        sdpa = torch.nn.functional.scaled_dot_product_attention
        want = _grads(lambda *t: sdpa(*t, is_causal=causal, enable_gqa=True), *(t.double() for t in (q, k, v, dout)))
        theirs = _grads(lambda *t: sdpa(*t, is_causal=causal, enable_gqa=True), q, k, v, dout)
        for name, o, t, w in zip(("dq", "dk", "dv"), runs[0], theirs, want, strict=True):
            error, library = ((x.double() - w).abs().max().item() for x in (o, t))
            assert error <= 1.5 * library + 1e-4, (name, error, library)


def test_under_deterministic_algorithms_a_windows_gluon_backward_gives_the_same_bits_every_run(monkeypatch):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the Gluon backward is sm_90's")
    monkeypatch.delenv("FLASH_ATTN_TRITON_ATOMIC_DQ", raising=False)  # the default: a window's Gluon backward
    module = import_from_folder()
    q, k, v, dout = _inputs(2, 8, 2, 4096, 128, torch.bfloat16, seed=12)
    calls = _recording_gluon(monkeypatch, module)
    window = lambda *t: module.masked_attention(*t, window_size=(255, 0))  # noqa: E731
    torch.use_deterministic_algorithms(True)
    try:
        runs = [_grads(window, q, k, v, dout) for _ in range(3)]
    finally:
        torch.use_deterministic_algorithms(False)
    assert calls == [(True, True)] * 3
    for run in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], run, strict=True))
    monkeypatch.setenv("FLASH_ATTN_TRITON_ATOMIC_DQ", "0")  # the masked Triton passes
    for fixed, passes in zip(runs[0], _grads(window, q, k, v, dout), strict=True):
        torch.testing.assert_close(fixed, passes, rtol=2e-2, atol=2e-2)
