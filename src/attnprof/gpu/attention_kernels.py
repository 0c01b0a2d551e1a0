"""Attention kernels of the libraries whose names no other decoder reads: the one table of attention-kernel
families every rule, the attention-call table and the communication analysis see through
`kernel_names.is_attention`. Imports no torch.

Each family is known by a part of its name that only its attention kernels have (read from the libraries'
sources and from real traces: AMD TraceLens' B200, MI300, SGLang and vLLM traces, HTA's tests/data):

- FlashAttention 2/3 (`flash::`/`pytorch_flash::` kernels: `flash_fwd_kernel`, `flash_bwd_*`,
  `compute_attn_ws`, `FlashAttnFwdSm90`, `FlashAttnBwdSm90`, FlashMLA's `flash_fwd_splitkv_mla_kernel`) and
  FlashAttention 4 (CuTe DSL: `...flash_attn...cute...FlashAttentionForwardSm100...`);
- cuDNN SDPA without the `cudnn` prefix (`sm90_flash_fprop_wgmma_...`, `sm100_flash_bprop_...`);
- CUTLASS/xformers memory-efficient attention (`AttentionKernel`, `AttentionBackwardKernel`), Composable
  Kernel and aiter (`FmhaFwdKernel`, `fmha_fwd_*`, `ck_fmha*`), TRT-LLM (`fmhaSm100a*`, `fmha_v2_*`,
  `masked_multihead_attention_kernel`): every name with `fmha` or `attention` in it (Inductor's
  Triton kernels are kernel_decoders' `_triton`: flex_attention's and flex_decoding's);
- AOTriton (PyTorch's ROCm SDPA: `attn_fwd`, `bwd_kernel_dk_dv`, `bwd_kernel_dq`, `bwd_preprocess`) and
  Triton's tutorial kernels (`_attn_fwd`, `_attn_bwd_dkdv`);
- FlashInfer (`BatchPrefillWithPagedKVCacheKernel`, `BatchDecodeWithPagedKVCacheKernel`, `MergeStates`), and
  Composable Kernel's paged prefill (`ck_tile::FmhaBatchPrefillWithPagedKVCacheKernel`) before it;
- SageAttention (`qk_int_sv_f8_attn_kernel`, `qk_int8_sv_f8_attn_kernel`, aiter's `sage_fwd`);
- vLLM and SGLang (`paged_attention_v1_kernel`, `paged_attention_ll4mi_*`, `kernel_unified_attention_2d/3d`
  and the 3d one's `reduce_segments`).

Not attention although the names hold a part: vLLM's `reshape_and_cache_flash_kernel` (it writes the KV
cache), `create_flashinfer_kv_indices_triton` and kernels with `flashinfer::` only in a template argument
(TRT-LLM's quantizers), cuDNN's convolutions (`cudnn::...`, `sm80_xmma_fprop_implicit_gemm_*`).
"""

from __future__ import annotations

import re

from attnprof.gpu.kernel_info import SIXTEEN_BIT, KernelInfo, arch_of, first_type, named

# (family, pattern on the name as strip_common and drop_params leave it), the first that matches names it
_FAMILIES = (
    # (demangled `flash::FlashAttnBwd<`, or mangled `5flash12FlashAttnBwd` where a trace keeps the mangled name)
    ("FlashAttention-3",
     re.compile(r"(?<![a-z_])flash(::|\d+)(compute_attn_ws|FlashAttnBwd|FlashAttnFwd|flash_attn_ws)")),
    # CuTe DSL names: `kernel_cutlass_kernel_flash_attncuteflash_fwd_sm100FlashAttentionForwardSm100_object_at_...`,
    # since flash-attention PR #2564 led by a readable `flash_fwd_sm100_bf16_head_dim128_..._kernel_cutlass_...`
    ("FlashAttention-4", re.compile(r"flash_attn\w*cute|FlashAttention(Forward|Backward)", re.IGNORECASE)),
    ("FlashMLA", re.compile(r"\bflash_\w*mla\w*kernel|\bflash::\w*mla")),
    ("FlashAttention-2", re.compile(r"(^|\b(pytorch_flash|flash)::)flash_(fwd|bwd)\w*")),
    ("cuDNN SDPA", re.compile(r"^sm\d+[a-z]?_flash_[bf]prop")),
    ("AOTriton", re.compile(r"^(attn_fwd|attn_bwd|bwd_kernel_(dk_dv|dq|fuse)|bwd_preprocess)\w*$")),
    ("Triton attention", re.compile(r"^_attn_(fwd|bwd)\w*$")),
    # before FlashInfer: ck_tile's `FmhaBatchPrefillWithPagedKVCacheKernel` (aiter on ROCm) takes its name
    ("Composable Kernel FMHA", re.compile(r"ck_tile\w*Fmha|\bck_fmha|Fmha(Fwd|Bwd)\w*Kernel|\bfmha_(fwd|bwd)")),
    ("FlashInfer", re.compile(r"(Batch|Single)(Prefill|Decode|POD)With\w*KVCache|MergeStates\w*Kernel")),
    # thu-ml/SageAttention's CUDA kernels (`qk_int_sv_f8_attn_kernel`, SM90's `qk_int8_sv_f8_attn_kernel`) and
    # aiter's `sage_fwd` on ROCm (TraceLens' xDiT FLUX trace); not its `sage_quant_kernel`, which quantizes Q and K
    ("SageAttention", re.compile(r"^sage_(fwd|bwd)\w*$|\bqk_int8?_sv_f(8|16)\w*attn")),
    ("vLLM unified attention", re.compile(r"^(kernel_unified_attention_[23]d|reduce_segments)$")),
    ("paged attention", re.compile(r"paged_attention", re.IGNORECASE)),
    ("TRT-LLM FMHA", re.compile(r"^fmhaSm\d+|^fmha_v2_|masked_multihead_attention")),
    ("CUTLASS memory-efficient attention", re.compile(r"Attention(Backward)?Kernel<")),
    ("fused attention", re.compile(r"fmha|attention", re.IGNORECASE)),
)
_NOT_ATTENTION = re.compile(r"reshape_and_cache|kv_indices|^cudnn|_xmma_")  # (Triton's kernels: kernel_decoders)
# What says a kernel computes attention's backward (dQ, dK, dV or their preprocessing), by library
_BACKWARD = re.compile(r"bwd|backward|bprop|cutlassB|dk_?dv|(?<![a-z])dq(?![a-z])|dot_do_o|convert_dq", re.IGNORECASE)


_MMA_TOKEN = re.compile(r"(?<![a-z])(wgmma|tcgen05|hmma|mfma)", re.IGNORECASE)
# A family's helpers around its main kernels: row sums, casts, reductions of split results (no matrix product)
_HELPER = re.compile(r"dot_do_o|convert_?dq|preprocess|postprocess|clear_dkv|combine|reduce", re.IGNORECASE)
# Families whose every kernel runs one MMA path, whatever the name shows: (path, why)
_FAMILY_MMA = {
    "FlashAttention-3": ("wgmma", "FlashAttention-3 is written for Hopper's warpgroup MMA (wgmma)"),
    "FlashMLA": ("wgmma", "FlashMLA's kernels are written for Hopper's warpgroup MMA (wgmma)"),
}
_FA4_MMA = {"sm90": "wgmma", "sm100": "tcgen05"}  # FlashAttention-4's kernel for each architecture it names


def decode(name: str, s: str, flat: str) -> KernelInfo | None:
    """The KernelInfo of an attention kernel of a family in `_FAMILIES`; None for any other name."""
    if _NOT_ATTENTION.search(flat):
        return None
    family = next((f for f, pattern in _FAMILIES if pattern.search(s if f.startswith(("Flash", "CUTLASS")) else flat)),
                  None)
    if family is None:
        return None
    dtype = first_type(flat)  # of the template arguments: the parameter list's `float const*` are scales, not inputs
    path, basis = _mma(family, flat, dtype)
    return named(name, family=family, library=family, is_attention=True, dtype=dtype,
                 arch="sm90" if family in _FAMILY_MMA else arch_of(flat), tensor_core_path=path,
                 tensor_cores=True if path else None, basis=basis,
                 notes=("backward" if _BACKWARD.search(flat) else "forward",))


def _mma(family: str, flat: str, dtype: str | None) -> tuple[str | None, str | None]:
    """(the MMA path, why) where the name or the family shows it; (None, None) where neither does."""
    m = _MMA_TOKEN.search(flat)
    if m:
        return m.group(1).lower(), f"`{m.group(1)}` in the name"
    if _HELPER.search(flat):
        return None, None
    if family in _FAMILY_MMA:
        return _FAMILY_MMA[family]
    if family == "FlashAttention-4" and (arch := arch_of(flat)) in _FA4_MMA:
        return _FA4_MMA[arch], f"FlashAttention-4's {arch} kernel is written for {_FA4_MMA[arch]}"
    if family == "FlashAttention-2" and dtype in SIXTEEN_BIT:
        return "mma.sync m16n8k16", "FlashAttention-2 computes in 16-bit on tensor cores only"
    return None, None


def is_backward_name(name: str) -> bool:
    """Whether an attention kernel's name says it computes the backward (gradients), whoever launched it."""
    return _BACKWARD.search(name) is not None
