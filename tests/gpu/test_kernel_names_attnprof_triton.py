"""attnprof's own Triton attention kernel is decoded as a fused attention kernel on tensor cores."""

from __future__ import annotations

from attnprof.gpu.kernel_names import decode


def test_flash_attn_triton_fwd_is_a_fused_attention_kernel_on_wgmma():
    info = decode("flash_attn_triton_fwd")
    assert info.is_attention and not info.is_gemm
    assert info.family == "Triton (attnprof flash_attn_triton)"
    assert (info.tensor_core_path, info.tensor_cores) == ("wgmma", True)


def test_inductors_triton_kernels_are_not_taken_for_it():
    assert decode("triton_tem_fused_flex_attention_0").family == "Triton template (flex_attention)"
    assert decode("triton_poi_fused_flash_attn_triton_fwd_0").family != "Triton (attnprof flash_attn_triton)"


def test_the_gluon_hopper_forward_is_told_apart_from_the_plain_triton_kernel():
    info = decode("flash_attn_triton_fwd_hopper")
    assert info.is_attention and (info.tensor_core_path, info.tensor_cores) == ("wgmma", True)
    assert info.family.startswith("Gluon") and info.family != decode("flash_attn_triton_fwd").family
    assert any("producer warpgroup" in note for note in info.notes)


def test_the_backward_passes_are_attention_kernels_and_only_the_two_with_products_use_tensor_cores():
    dkdv, dq, pre = (decode(f"flash_attn_triton_bwd_{n}") for n in ("dkdv", "dq", "preprocess"))
    assert dkdv.is_attention and dq.is_attention and pre.is_attention
    assert dkdv.tensor_cores and dq.tensor_cores and dkdv.tensor_core_path == "wgmma"
    assert pre.tensor_cores is False and pre.family != dkdv.family
