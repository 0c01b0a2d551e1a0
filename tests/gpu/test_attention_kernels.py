"""The one attention recognizer (`kernel_names.is_attention`, families in gpu/attention_kernels.py): the kernel
names of each library, as their sources and real traces spell them, are attention; cuDNN's convolutions, the KV
cache writers and kernels that only mention a library in a template argument are not. The corpus tier reads
the real traces' kernel names with plain json (no attnprof reader) and checks every name there."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest

from attnprof.gpu import kernel_names as kn
from attnprof.gpu.attention_kernels import is_backward_name
from support import corpus_trace

ATTENTION = {  # name -> (family, computes the backward)
    "void flash::compute_attn_ws<Flash_fwd_kernel_traits<128, 128, 176, 2, 2, false, 1, cutlass::bfloat16_t>, "
    "true, false, false>(flash::Flash_fwd_params)": ("FlashAttention-3", False),
    "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnBwdSm90<cute::tuple<cute::C<64>>, "
    "cutlass::bfloat16_t> > >(flash::FlashAttnBwdSm90<>::Params)": ("FlashAttention-3", True),
    "void flash::FlashAttnBwd<int>(int)": ("FlashAttention-3", True),
    "flash_fwd_kernel": ("FlashAttention-2", False),
    "void pytorch_flash::flash_bwd_dot_do_o_kernel<true>(pytorch_flash::Flash_bwd_params)": ("FlashAttention-2", True),
    "void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64>, true>(flash::Flash_bwd_"
    "params)": ("FlashAttention-2", True),
    "kernel_cutlass_kernel_flash_attncuteflash_fwd_sm100FlashAttentionForwardSm100_object_at__tensor0":
        ("FlashAttention-4", False),
    # flash-attention PR #2564's readable names come first, before the CuTe DSL's own
    "flash_bwd_sm100_bf16_head_dim128_tile128x128_q_stages2_threads384_causal_kernel_cutlass_kernel_flash_attncute"
    "flash_bwd_sm100FlashAttentionBackwardSm100_object_at__tensor0000o11101213_0": ("FlashAttention-4", True),
    "_ZN7cutlass13device_kernelIN5flash12FlashAttnBwdINS1_21CollectiveMainloopBwdILi2EN4cute5tupleIJNS4_1CILi1EEES7_"
    "S7_EEENS_10bfloat16_tEfNS_4arch4Sm90EEEEEvNT_6ParamsE": ("FlashAttention-3", True),  # a mangled name
    "sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0": ("cuDNN SDPA", False),
    "sm100_flash_bprop_tcgen05_bf16_knob_3": ("cuDNN SDPA", True),
    "fmha_cutlassB_bf16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::Sm80,"
    " cutlass::bfloat16_t, true, false, true, 64, 64, 64, false>::Params)":
        ("CUTLASS memory-efficient attention", True),
    "triton_tem_fused_flex_decoding_0": ("Triton template (flex_attention)", False),
    "attn_fwd": ("AOTriton", False), "bwd_kernel_dk_dv": ("AOTriton", True), "bwd_kernel_dq": ("AOTriton", True),
    "_attn_bwd_dkdv": ("Triton attention", True),
    "_ZN7ck_tile6kentryILi1ENS_13FmhaFwdKernelINS_28BlockFmhaPipelineQRKSVSAsyncEEEEvNT_5KargsE":
        ("Composable Kernel FMHA", False),
    "fmha_fwd_hd128_bf16_causal": ("Composable Kernel FMHA", False),
    "fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext": ("TRT-LLM FMHA", False),
    "fmha_v2_flash_attention_fp16_64_128_S_qkv_128_sm90_kernel": ("TRT-LLM FMHA", False),
    "void flashinfer::BatchPrefillWithPagedKVCacheKernel<KernelTraits, Params>(Params)": ("FlashInfer", False),
    "void flashinfer::BatchDecodeWithPagedKVCacheKernel<PosEncodingMode(0), 2u>(Params)": ("FlashInfer", False),
    "void flashinfer::BatchPODWithKVCacheTensorKernel<KTraits_P, KTraits_D, Params>(Params)": ("FlashInfer", False),
    "void vllm::paged_attention_v2_kernel<unsigned short, unsigned short, 128, 16, 128, "
    "(vllm::Fp8KVCacheDataType)0, false, 512>(float*)": ("paged attention", False),
    "kernel_unified_attention_3d": ("vLLM unified attention", False),
    "void paged_attention_ll4mi_reduce_kernel<__hip_bfloat16, __hip_bfloat16, 128, 128, 256, 3, false>"
    "(__hip_bfloat16*)": ("paged attention", False),
    "void flash::flash_fwd_splitkv_mla_kernel<Flash_fwd_kernel_traits_mla<576, 64, 64, 8, cutlass::bfloat16_t, "
    "512>, true>(Flash_fwd_mla_params)": ("FlashMLA", False),
    # aiter's paged prefill on ROCm (TraceLens' SGLang Qwen3-8B trace, mangled): Composable Kernel's, not FlashInfer's
    "_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernelINS_40BlockFmhaBatchPrefillPipelineQRKSVSAsync"
    "INS_36BlockFmhaBatchPrefillPipelineProblemIDF16bDF16bDF16bffDF16bhfDF16bfDF16bEEEEEEEvT1_":
        ("Composable Kernel FMHA", False),
    "sage_fwd": ("SageAttention", False),  # aiter's, in TraceLens' xDiT FLUX trace (MI300X, HIP graphs)
    "void qk_int_sv_f8_attn_kernel<128u, 64u, 32u, 64u, 128u, (DataType)1>": ("SageAttention", False),
    "void sageattention_sm89::qk_int8_sv_f8_attn_kernel<128u, 64u>(signed char*)": ("SageAttention", False),
}
NOT_ATTENTION = (
    "sage_quant_kernel",  # SageAttention's quantization of Q and K before its attention kernel
    "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>"
    "(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)",
    "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_"
    "g1_tensor16x8x8_execute_kernel_cudnn_infer",
    "cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1",
    "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char, (vllm::Fp8KVCacheDataType)1>"
    "(__nv_bfloat16 const*)",
    "void tensorrt_llm::kernels::quantize_with_block_size<(tensorrt_llm::BlockScaleQuantizationType)2, __nv_bfloat16,"
    " 32, true>(int, flashinfer::QuantizationSFLayout)",
    "create_flashinfer_kv_indices_triton",
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*)",
)


@pytest.mark.parametrize("name", sorted(ATTENTION))
def test_each_library_s_attention_kernels_are_attention_with_their_family_and_direction(name):
    family, backward = ATTENTION[name]
    assert kn.is_attention(name)
    assert kn.decode(name).family == family
    assert is_backward_name(name) is backward


@pytest.mark.parametrize("name, path", [
    ("void flash::compute_attn_ws<Flash_fwd_kernel_traits<128, 128, 176, 2, 2, false, 1, cutlass::bfloat16_t>, "
     "true>(flash::Flash_fwd_params)", "wgmma"),  # FlashAttention-3: Hopper only
    ("void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16>(int)", "mfma"),  # in the name
    ("void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, cutlass::bfloat16_t>>()",
     "mma.sync m16n8k16"),
    ("void pytorch_flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<cutlass::bfloat16_t>>(int)", None),
    ("void flash::flash_fwd_mla_combine_kernel<cutlass::bfloat16_t, 512, 64>(Flash_fwd_mla_params)", None),
    ("fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext", None),  # not shown
    ("flash_fwd_sm100_bf16_head_dim128_tile128x128_threads384_causal_kernel_cutlass_kernel_flash_attncuteflash_fwd_"
     "sm100FlashAttentionForwardSm100_object_at__tensor0", "tcgen05"),
])
def test_the_mma_path_is_said_only_where_the_name_or_family_shows_it(name, path):
    info = kn.decode(name)
    assert (info.tensor_core_path, info.tensor_cores) == (path, True if path else None)


@pytest.mark.parametrize("name", NOT_ATTENTION)
def test_convolutions_cache_writers_and_mentions_in_templates_are_not_attention(name):
    assert not kn.is_attention(name)


def test_the_element_type_is_the_template_s_never_the_parameter_list_s():
    rocm = ("void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16, __hip_bfloat16, "
            "(vllm::Fp8KVCacheDataType)0, 1, 128, 256, false, 4, 1, ck_tile::ComposedAttention<0u, false> >"
            "(__hip_bfloat16 const*, float const*)")
    assert kn.decode(rocm).dtype == "bf16"  # tl/sglang_decode's kernel: its float parameters are scales
    assert kn.decode("void flashinfer::MergeStatesKernel<8u, 16u>(float*, float*)").dtype is None


def test_the_prefilter_passes_every_attention_name():
    assert all(kn.could_be(name) & kn.ATTENTION for name in ATTENTION)


def _kernel_names(path) -> Counter:
    with gzip.open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return Counter(e["name"] for e in events if e.get("cat") in ("kernel", "Kernel") and e.get("ph") == "X")


@pytest.mark.parametrize("trace, attention", [  # {short name: launches}, counted in the trace by hand
    ("tl/b200/eager_trace.json.gz", {"fmhaSm100aKernel": 36}),
    ("tl/compile_triton/trace.json.gz", {"attn_fwd": 1}),
    ("tl/sglang_decode/decode.json.gz", {"paged_attention_ll4mi_QKV_mfma16_kernel": 36,
                                         "paged_attention_ll4mi_reduce_kernel": 36}),
    ("tl/vllm_graph/graph_execution.json.gz", {"kernel_unified_attention_2d": 12, "kernel_unified_attention_3d": 12,
                                               "reduce_segments": 12}),
    ("tl/mi300_qwen/qwen.json.gz", {"attn_fwd": 35}),
    ("tl/h100_qwen/qwen.json.gz", {"flash_fwd_kernel": 34}),
    ("hta/nccl/nccl_data.json.gz", {}),  # ResNet: cuDNN convolutions, no attention
    ("kineto/resnet50/worker0.1623143089861.pt.trace.json.gz", {}),
])
def test_the_real_traces_attention_kernels_are_exactly_the_attention_ones(trace, attention):
    names = _kernel_names(corpus_trace(trace))
    found: Counter = Counter()
    for name, n in names.items():
        if kn.is_attention(name):
            found[next((k for k in attention if k in name), name)] += n
    assert dict(found) == attention
