"""Kernel-name decoding and normalisation, on the names the H200 fixtures hold and on known library names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from attnprof.analysis import attribution as analysis
from attnprof.analysis.kernel_summary import kernel_table
from attnprof.gpu import kernel_names
from attnprof.trace import reader as trace
from attnprof.trace.names import Names
from support import H200, h200_trace


def names_in(path) -> list[str]:
    return [row["name"] for row in kernel_table(analysis.analyze_trace(trace.load(path)))]


def the_kernel(variant: str, marker: str) -> str:
    found = [n for n in names_in(h200_trace(variant)) if marker in n]
    assert len(found) == 1, found
    return found[0]


def test_flash_attention_2_from_the_fixture():
    info = kernel_names.decode(the_kernel("sdpa-flash", "flash_fwd"))
    assert (info.family, info.library) == ("FlashAttention-2", "pytorch_flash")
    assert (info.dtype, info.tile) == ("bf16", "128x128")
    assert info.is_attention and not info.is_gemm
    assert info.tensor_cores is True and "mma.sync" in info.tensor_core_path
    assert info.short == "pytorch_flash::flash_fwd_kernel"


def test_cutlass_fmha_from_the_fixture():
    info = kernel_names.decode(the_kernel("sdpa-efficient", "fmha_cutlassF"))
    assert (info.family, info.dtype, info.tile, info.arch) == (
        "CUTLASS FMHA (xformers memory-efficient)", "bf16", "64x64", "sm80")
    assert info.is_attention and info.tensor_cores is True
    assert any("registers" in note for note in info.notes)  # the `rf` in the name


def test_cudnn_from_the_fixture_reads_sm90_wgmma_and_does_not_claim_fp16():
    info = kernel_names.decode(the_kernel("sdpa-cudnn", "cudnn_generated"))
    assert (info.family, info.arch, info.tensor_core_path) == ("cuDNN", "sm90", "wgmma")
    assert info.tile == "64x128x64"
    assert info.is_attention and info.tensor_cores is True
    # the name says f16 but the fixture's inputs are bf16: cuDNN's `f16` means 16-bit
    assert info.dtype == "16-bit"


def test_math_gemms_are_fp32_on_cuda_cores():
    gemms = [n for n in names_in(h200_trace("sdpa-math")) if "gemm" in n]
    assert len(gemms) == 2
    for name in gemms:
        info = kernel_names.decode(name)
        assert info.is_gemm and info.dtype == "fp32" and info.arch == "sm80"
        assert info.tensor_cores is False and info.tensor_core_path == "ffma (CUDA cores)"
    assert {kernel_names.decode(n).tile for n in gemms} == {"128x128x8", "64x64x8"}


def test_nvjet_bf16_gemms_are_tensor_core_kernels():
    nvjet = [n for n in names_in(H200 / "llama_fwd_eager.json.gz") if n.startswith("nvjet")]
    assert nvjet
    for name in nvjet:
        info = kernel_names.decode(name)
        assert (info.family, info.dtype) == ("cuBLAS (nvjet)", "bf16")
        assert (info.arch, info.tensor_core_path) == ("sm90", "wgmma")
        assert info.is_gemm and info.tensor_cores is True
    # `_v_` and `_h_` both occur among the bf16 GEMMs: that field is not the type
    assert {"_v_" in n for n in nvjet} == {True, False}


def test_triton_flex_kernel_keeps_unknowns_unknown():
    info = kernel_names.decode(the_kernel("flex", "triton_tem"))
    assert info.is_attention and "flex_attention" in info.family
    assert info.dtype is None and info.arch is None and info.tensor_cores is None and info.tile is None


def test_cutlass_simt_sgemm_of_the_llama_rope_is_cuda_cores():
    name = next(n for n in names_in(H200 / "llama_fwd_eager.json.gz") if "simt_sgemm" in n)
    info = kernel_names.decode(name)
    assert info.short == "cutlass_80_simt_sgemm_128x32_8x5_nn_align1"
    assert (info.is_gemm, info.dtype, info.arch, info.tensor_cores) == (True, "fp32", "sm80", False)
    assert "simt" in info.basis


@pytest.mark.parametrize("name, tc, path, dtype, arch", [
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn", True, "s16816", "bf16", "sm80"),
    ("volta_h884gemm_64x64_ldg8_nn", True, "h884", "fp16", "sm70"),
    ("ampere_sgemm_128x64_nn", False, "ffma (CUDA cores)", "fp32", "sm80"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_cluster1x2x1_warpgroupsize2x1x1_gmma_se_kernel",
     True, "gmma", "bf16", "sm90"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_kernel__5x_cublas",
     True, None, "bf16", "sm90"),
    ("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn_align8",
     True, "tensorop", "bf16", "sm80"),
])
def test_gemm_fingerprints(name, tc, path, dtype, arch):
    info = kernel_names.decode(name)
    assert info.is_gemm
    assert (info.tensor_cores, info.tensor_core_path, info.dtype, info.arch) == (tc, path, dtype, arch)


def test_hub_and_flash_attention_3_names():
    fa2 = kernel_names.decode(
        "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
        "cutlass::half_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::half_t> >, false, true, false, "
        "false, true, true, false, false>(flash::Flash_fwd_params)")
    assert (fa2.family, fa2.library, fa2.dtype, fa2.tile) == ("FlashAttention-2", "flash", "fp16", "128x64")
    fa3 = kernel_names.decode("void cutlass::device_kernel<flash::enable_sm90_or_later<"
                              "flash::FlashAttnFwdSm90<cutlass::bfloat16_t> > >(int)")
    assert (fa3.family, fa3.arch) == ("FlashAttention-3", "sm90")
    assert (fa3.tensor_core_path, fa3.dtype) == ("wgmma", "bf16")
    assert fa3.short == "flash::FlashAttnFwdSm90"


def test_unknown_name_decodes_to_nothing():
    info = kernel_names.decode("my_custom_kernel")
    assert (info.family, info.dtype, info.tensor_cores, info.is_gemm, info.is_attention) == (
        None, None, None, False, False)


def test_copy_kernels_name_the_type_they_write():
    names = names_in(h200_trace("sdpa-math"))
    up = next(n for n in names if "direct_copy_kernel_cuda" in n)
    down = next(n for n in names if "bfloat16_copy_kernel_cuda" in n)
    assert kernel_names.decode(up).cast_to == "fp32"
    assert kernel_names.decode(down).cast_to == "bf16"
    assert kernel_names.decode(next(n for n in names if "FillFunctor<float>" in n)).cast_to is None


def test_short_names_keep_the_functor():
    masked = the_kernel("naive", "masked_fill_kernel")
    assert kernel_names.short_name(masked) == "elementwise_kernel[masked_fill_kernel]"
    assert kernel_names.short_name("Memcpy DtoD (Device -> Device)") == "Memcpy DtoD (Device -> Device)"


def test_normalize_keeps_transfers_and_flat_names():
    assert kernel_names.normalize("Memcpy DtoD (Device -> Device)") == "Memcpy DtoD (Device -> Device)"
    assert kernel_names.normalize("Memcpy HtoD (Pageable -> Device)") != kernel_names.normalize(
        "Memcpy DtoD (Device -> Device)")
    nvjet = "nvjet_sm90_tst_64x512_64x2_1x2_h_bz_coopB_NNT"
    assert kernel_names.normalize(nvjet) == nvjet  # the tile is identity, not noise
    other = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"
    assert kernel_names.normalize(nvjet) != kernel_names.normalize(other)


def test_normalize_removes_template_noise_only():
    soft = "void (anonymous namespace)::softmax_warp_forward<float, float, float, {}, false, false>(int)"
    assert kernel_names.normalize(soft.format(9)) == kernel_names.normalize(soft.format(10))
    bf16 = soft.replace("float, float, float", "c10::BFloat16, c10::BFloat16, float")
    assert kernel_names.normalize(bf16.format(10)) != kernel_names.normalize(soft.format(10))
    lam = ("void at::native::vectorized_elementwise_kernel<{}, at::native::FillFunctor<float>, "
           "std::array<char*, 1ul> >(int)")
    assert kernel_names.normalize(lam.format(4)) == kernel_names.normalize(lam.format(8))
    assert kernel_names.normalize("triton_tem_fused_flex_attention_0") == kernel_names.normalize(
        "triton_tem_fused_flex_attention_3")
    assert kernel_names.normalize("kernel_at_0x7f3a2b10") == kernel_names.normalize("kernel_at_0xdeadbeef")
    assert "(" not in kernel_names.normalize(the_kernel("sdpa-efficient", "fmha"))  # parameter list dropped


def test_distinct_kernels_never_read_the_same_in_a_table():
    from attnprof.gpu.kernel_names import distinct_short_names

    fill = ("void at::native::vectorized_elementwise_kernel<{w}, at::native::FillFunctor<{t}>, std::array<char*, 1ul> >"
            "(int, at::native::FillFunctor<{t}>, std::array<char*, 1ul>)")
    names = [fill.format(w=4, t="float"), fill.format(w=4, t="c10::BFloat16"), fill.format(w=8, t="float"),
             "flash_fwd_kernel"]
    shown = distinct_short_names(names)
    assert len(set(shown)) == len(names) and shown[3] == "flash_fwd_kernel"
    assert shown[1] == "vectorized_elementwise_kernel[FillFunctor] (bf16)" and shown[0].endswith("(fp32) #1")


JOINED_OR_ODD = [  # names whose GEMM or attention part strip_common joins, or spelled in capitals or spaced out
    "cudnn_sd(anonymous namespace)::pa_fprop_wgmma_f16", "my_GEMM_kernel", "Ge(anonymous namespace)::mV_x",
    "void  flash::flash_fwd_kernel<int>(int)", "triton_mm_3", "triton_tem_fused_addmm_1", "triton_bmm_0",
    "triton_tem_fused_flex_attention_0", "nvjet_tst_64x8_64x16_1x2_h_bz_TNT", "fmha_cutlassB_f16_aligned_64x64_sm80",
    "flash_attn_triton_bwd_preprocess", "fla(anonymous namespace)::sh_fwd_kernel", "cutlass_80_simt_sgemm_128x32",
    "ge(anonymous  namespace)::mm_x", "fl(anonymous namespace)::(anonymous namespace)::ash_fwd_kernel",
    "(anonymous namespace)::ge(anonymous namespace::mm", "ge\0mm", "x\0gemm", "nvJet_ü_GEMM", "ÄTTENTION_ü",
    "ge(anonymous namespace)::", "(anonymous namespace)::mm", "sd(anonymous\tnamespace)::pa", "",
]


def test_gemm_and_attention_tests_answer_what_decode_does():
    fixtures = sorted((Path(__file__).parents[1] / "fixtures").glob("h200*/*.json.gz"))
    names = {n for path in fixtures for n in trace.load(path).columns.names} | set(JOINED_OR_ODD)
    decoded = {n: kernel_names.decode(n) for n in names}
    assert sum(d.is_gemm for d in decoded.values()) > 10 and sum(d.is_attention for d in decoded.values()) > 10
    for name, info in decoded.items():
        assert (kernel_names.is_gemm(name), kernel_names.is_attention(name)) == (info.is_gemm, info.is_attention), name


def test_the_prefilter_of_all_names_at_once_is_could_be_of_each():
    fixtures = sorted((Path(__file__).parents[1] / "fixtures").glob("h200*/*.json.gz"))
    names = sorted({n for path in fixtures for n in trace.load(path).columns.names} | set(JOINED_OR_ODD))
    table = Names()
    data, ends = table.joined(table.codes(names))
    bits = kernel_names.could_be_each(data, ends).tolist()
    assert bits == [kernel_names.could_be(n) for n in names]
    assert {0, kernel_names.GEMM, kernel_names.ATTENTION} <= set(bits)
    for name, bit in zip(names, bits, strict=True):  # the prefilter never drops what decode would say
        info = kernel_names.decode(name)
        assert (bit & kernel_names.GEMM or not info.is_gemm) and (bit & kernel_names.ATTENTION or not info.is_attention)
    assert kernel_names.could_be_each(b"", np.zeros(0, np.int64)).tolist() == []
