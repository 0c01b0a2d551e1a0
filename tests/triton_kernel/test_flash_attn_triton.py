"""attnprof's Triton FlashAttention: its results against float64 (test_kernel_layout.py: its folder).

On CPU the kernel runs under Triton's interpreter in a fresh process (interpreted_cases.py says why),
on tiny float16 shapes; on a GPU it runs compiled, in bfloat16 and float16, against cuDNN's error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnprof.kernels import import_from_folder  # noqa: E402
from support import FP16_TOLERANCE, run_interpreted  # noqa: E402

CASES = Path(__file__).with_name("interpreted_cases.py")


@pytest.fixture(scope="module")
def interpreted() -> dict:
    return run_interpreted(CASES)


def test_the_interpreted_forward_matches_float64_for_every_shape_and_mask(interpreted):
    assert len(interpreted["forward"]) == 6
    for case, errors in interpreted["forward"].items():
        assert errors["same_shape_and_dtype"], case
        assert errors["out"] < FP16_TOLERANCE, case
        assert errors["lse"] < 1e-4, case


def test_the_warp_specialised_and_persistent_loop_forms_compute_the_same_attention(interpreted):
    assert len(interpreted["loop_forms"]) == 6
    for case, error in interpreted["loop_forms"].items():
        assert error < FP16_TOLERANCE, case


def test_causal_tiles_interleaved_across_a_ragged_group_of_heads_compute_the_same_attention(interpreted):
    assert interpreted["head_groups"] < FP16_TOLERANCE


def test_flash_attn_func_takes_bshd_and_aligns_causal_to_the_bottom_right(interpreted):
    assert interpreted["flash_attn_func"] < FP16_TOLERANCE


def test_bshd_views_packed_qkv_and_strided_heads_are_read_where_they_lie_and_outputs_follow_the_query(interpreted):
    cases = interpreted["layouts"]
    assert len(cases) == 12
    for case, result in cases.items():
        assert result["error"] < FP16_TOLERANCE, case
        assert result["output_layout"], case
        copied = case.startswith("copied:")  # only q is unreadable there: it alone is copied
        assert result["read_in_place"] == [not copied, True, True], case


def test_flash_attn_func_returns_contiguous_bshd_and_its_gradients_match_float64(interpreted):
    result = interpreted["flash_attn_func_gradients"]
    assert result.pop("output_contiguous_bshd")
    assert sorted(result) == ["dk", "dq", "dv"]
    assert all(error < 2e-3 for error in result.values()), result


def test_both_triton_backwards_match_float64_gradients_with_gqa_odd_lengths_and_both_diagonals(interpreted):
    assert len(interpreted["gradients"]) == 30
    for name, relative_error in interpreted["gradients"].items():
        assert relative_error < 2e-3, name  # float16 operands: measured 3e-4 to 6e-4


def test_the_custom_ops_pass_torch_library_opcheck_on_bhsd_and_bshd(interpreted):
    names = [name + layout for layout in ("", "_bshd") for name in ("fwd", "bwd", "bwd_single_pass")]
    assert interpreted["opcheck"] == dict.fromkeys(names, "ok")


def test_torch_compile_fullgraph_traces_a_module_calling_it_and_its_gradients_equal_eagers(interpreted):
    assert interpreted["compiled"] == 0.0


def _force_forward(monkeypatch, module, by_size: dict) -> None:
    """Which Gluon configuration runs at every size (none: the plain kernel), in training steps too, with fresh
    plans: a plan made for the same shape by an earlier test would keep that test's kernel."""
    monkeypatch.setattr(sys.modules[module.__name__ + ".forward._hopper_launch"], "BY_SIZE", by_size)
    monkeypatch.setattr(sys.modules[module.__name__ + ".forward._hopper_launch"], "TRAINING_LEAST", {})
    monkeypatch.setattr(sys.modules[module.__name__ + ".forward._forward_plans"], "_FORWARD_PLANS", {})


@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("batch, heads, kv_heads, seq, head_dim", [
    (2, 4, 4, 1024, 128),  # the Gluon forward on an H200 (forced on: the shape is below BY_SIZE's sizes)
    (1, 8, 2, 512, 64),  # GQA at head dim 64, Gluon too
    (1, 4, 4, 1000, 128),  # a ragged length: the plain Triton kernel
])
def test_on_the_gpu_the_error_is_no_worse_than_cudnns(monkeypatch, causal, dtype, batch, heads, kv_heads, seq,
                                                      head_dim):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    module = import_from_folder()
    _force_forward(monkeypatch, module, {64: ((0, "two_per_sm_n64_s2"),), 128: ((0, "overlap"),)})
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(batch, heads, seq, head_dim, generator=gen).to(dtype).cuda()
    k, v = (torch.randn(batch, kv_heads, seq, head_dim, generator=gen).to(dtype).cuda() for _ in range(2))
    mask = torch.ones(seq, seq, dtype=torch.bool).tril() if causal else None
    want = torch.nn.functional.scaled_dot_product_attention(
        q.double().cpu(), k.double().cpu(), v.double().cpu(), attn_mask=mask, enable_gqa=True).cuda()
    ours = (module.attention(q, k, v, causal=causal).double() - want).abs().max().item()
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]):
        theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    assert ours <= 1.5 * (theirs.double() - want).abs().max().item() + 1e-4


@pytest.mark.cuda
@pytest.mark.parametrize("gluon", [False, True])
@pytest.mark.parametrize("layout", ["bshd", "packed_qkv_gqa"])
def test_on_the_gpu_bshd_and_packed_layouts_are_read_in_place_as_accurately_as_cudnn(monkeypatch, gluon, layout):
    """Both forwards (the Gluon one forced on at every size, or off) on [B, S, H, D] memory; the second call of a
    shape runs through its plan (the Gluon one with per-call descriptors) and must give the same output."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    module = import_from_folder()
    _force_forward(monkeypatch, module, dict.fromkeys((64, 128), ((0, "overlap"),) if gluon else ()))
    gen = torch.Generator().manual_seed(5)
    if layout == "bshd":
        q, k, v = (torch.randn(2, 1024, 4, 128, generator=gen).bfloat16().cuda().transpose(1, 2) for _ in range(3))
    else:  # [B, S, 8 + 2 + 2, D]: 8 query heads, 2 key and 2 value heads in one projection
        qkv = torch.randn(1, 512, 12, 64, generator=gen).bfloat16().cuda()
        q, k, v = (qkv[:, :, a:b].transpose(1, 2) for a, b in ((0, 8), (8, 10), (10, 12)))
    want = torch.nn.functional.scaled_dot_product_attention(*(t.double() for t in (q, k, v)), is_causal=True,
                                                            enable_gqa=True)
    out = module.attention(q, k, v, causal=True)
    assert out.transpose(1, 2).is_contiguous() and torch.equal(out, module.attention(q, k, v, causal=True))
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    assert (out.double() - want).abs().max().item() <= 1.5 * (theirs.double() - want).abs().max().item() + 1e-4


def test_the_autotuner_prunes_configurations_with_the_sizes_it_passes_positionally():
    """Triton's autotuner hands early_config_prune the positional arguments by name and only the
    keyword ones as keywords: the key length SK is positional."""
    launch = sys.modules[import_from_folder().__name__ + "._launch"]
    configs = launch.candidate_configs()
    kept = launch.prune_configs(configs, {"SK": 64}, HEAD_DIM=128, HEAD_DIM_QK=128)
    assert kept and all(128 in launch.head_dims_of(c) and c.kwargs["BLOCK_N"] <= 64 for c in kept)
    assert any(launch.head_dims_of(c) == (64,) for c in configs)  # some fit head dim 64 only
    assert len(launch.prune_configs(configs, {"SK": 8192}, HEAD_DIM=128, HEAD_DIM_QK=128)) > len(kept)
    assert all(128 not in launch.head_dims_of(c) for c in configs if c not in launch.prune_configs(
        configs, {"SK": 8192}, HEAD_DIM=128, HEAD_DIM_QK=128))


def test_configurations_survive_the_autotuners_disk_cache_round_trip():
    """Triton's autotuner stores config.__dict__ and rebuilds Config(**it) on a cache hit (seen failing
    on the H200 when a Config carried an extra attribute)."""
    launch = sys.modules[import_from_folder().__name__ + "._launch"]
    for config in launch.candidate_configs():
        rebuilt = type(config)(**json.loads(json.dumps(config.__dict__)))
        assert str(rebuilt) == str(config) and launch.head_dims_of(rebuilt) == launch.head_dims_of(config)


def test_causal_launches_group_heads_whose_keys_fit_in_l2_and_others_go_head_by_head():
    launch = sys.modules[import_from_folder().__name__ + "._launch"]
    q = torch.empty(0, dtype=torch.bfloat16)
    args = {"CAUSAL": True, "PERSISTENT": False, "SK": 4096, "HEAD_DIM": 128, "Q": q, "GROUP": 1, "n_bh": 64}
    kv_bytes_per_head = 2 * 4096 * 128 * 2
    group = launch.head_group(args)
    assert group * kv_bytes_per_head <= launch.L2_GROUP_BYTES < (group + 1) * kv_bytes_per_head
    assert launch.head_group({**args, "SK": 8192}) == launch.head_group(args) // 2
    assert launch.head_group({**args, "n_bh": 3}) == 3
    assert launch.head_group({**args, "CAUSAL": False}) == launch.head_group({**args, "PERSISTENT": True}) == 1


SHARED_MEMORY_PER_BLOCK = 232448  # an H100/H200 block's limit (227 KiB)


@pytest.mark.parametrize("config, head_dim, causal", [
    ("overlap", 128, True), ("overlap", 64, False), ("pingpong_s3", 128, True), ("pingpong_s3", 64, False),
    ("two_per_sm_n64_s2", 64, True),  # its register cap at launch (80): no local memory in the PTX either
    ("persistent", 64, True), ("persistent", 128, False)])  # one program an SM, Q double-buffered
def test_the_hopper_kernel_compiles_for_sm90_with_wgmma_and_no_spills(config, head_dim, causal):
    """No GPU needed: Triton compiles the Gluon forward for sm_90 with its own ptxas."""
    pytest.importorskip("triton.experimental.gluon.nvidia.hopper")
    launch = sys.modules[import_from_folder().__name__ + "._launch"]
    kernel = launch._hopper_launch.compile_for_sm90(head_dim, causal, "bf16", config)
    ptx = kernel.asm["ptx"]
    assert kernel.metadata.shared <= SHARED_MEMORY_PER_BLOCK
    assert "wgmma.mma_async" in ptx and "setmaxnreg.inc" in ptx and "setmaxnreg.dec" in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx  # nothing spilled to local memory
    assert kernel.metadata.num_warps == 12  # two consumer warpgroups and the producer's
    max_regs = launch._hopper_launch.CONFIGS[config].max_regs
    if max_regs:
        assert f".maxnreg {max_regs}" in ptx and kernel.metadata.shared * 2 <= SHARED_MEMORY_PER_BLOCK  # 2 an SM


def test_only_sm90_self_attention_in_whole_tiles_goes_to_the_hopper_kernel():
    launch = sys.modules[import_from_folder().__name__ + "._launch"]
    unsupported = launch._hopper_launch.unsupported
    q, ragged, longer = (torch.empty(4, 16, n, 64, dtype=torch.float16) for n in (4096, 4000, 4224))
    assert "multiple of 128" in unsupported(ragged, ragged, causal=False, causal_off=0)
    assert "as many queries as keys" in unsupported(q, longer, causal=False, causal_off=0)  # decode
    assert "top-left" in unsupported(q, q, causal=True, causal_off=128)
    assert "sm_90" in unsupported(q, q, causal=True, causal_off=0)  # a CPU tensor, 2^37 FLOPs
    small = q[:, :, :512]  # 2^32 FLOPs
    assert "too small" in unsupported(small, small, causal=False, causal_off=0)
    # the article's problem (head dim 64, 2^34 FLOPs) and as much work at head dim 128 pass the gate (a CPU
    # tensor is then refused for its device); half of it does not
    hopper = launch._hopper_launch
    for shape, config in (((8, 16, 1024, 64), "two_per_sm_n64_s2_skip"), ((16, 16, 1024, 64), "two_per_sm_n64_s2"),
                          ((4, 16, 1024, 128), "overlap"), ((4, 16, 4096, 64), "overlap")):
        t = torch.empty(shape)
        assert "sm_90" in unsupported(t, t, causal=True, causal_off=0), shape
        assert hopper.configuration(shape[3], hopper.problem_flops(shape[0] * shape[1], shape[2], shape[3],
                                                                    True)) == config
    half = torch.empty(4, 16, 1024, 64)
    assert "too small" in unsupported(half, half, causal=True, causal_off=0)


def test_hopper_descriptors_are_over_each_tensors_matrix_view_with_the_boxes_the_kernel_copies():
    pytest.importorskip("triton.experimental.gluon.nvidia.hopper")
    from triton.experimental.gluon import language as gl

    launch = sys.modules[import_from_folder().__name__ + "._launch"]
    views = sys.modules[import_from_folder().__name__ + "._tma_views"]
    k = torch.empty(2, 3, 256, 128, dtype=torch.bfloat16)
    desc = launch._hopper_launch._descriptor(k, views.matrix_view(k), 128)
    assert list(desc.shape) == [2 * 3 * 256, 128] and list(desc.strides) == [128, 1]
    assert list(desc.block_shape) == [128, 128]
    assert desc.layout == gl.NVMMASharedLayout.get_default_for([128, 128], gl.bfloat16)
    bshd = k.transpose(1, 2).contiguous().transpose(1, 2)  # [B, S, H, D] memory: a token of every head a row
    desc = launch._hopper_launch._descriptor(bshd, views.matrix_view(bshd), 64)
    assert list(desc.shape) == [2 * 256, 3 * 128] and list(desc.strides) == [3 * 128, 1]
