"""The per-library readers of kernel names behind `kernel_names.decode`: each returns a KernelInfo when the
name is its library's, else None. The helpers they share are in kernel_info; imports no torch."""

from __future__ import annotations

import re

from attnprof.gpu import attention_kernels
from attnprof.gpu.kernel_info import (
    ELEMENT_TYPES,
    SIXTEEN_BIT,
    KernelInfo,
    arch_of,
    compute_type,
    first_type,
    named,
    split_template,
    tile_of,
)

# cuBLAS/cuBLASLt xmma type fields: `gemm_f32f32_f32f32_f32` (A/B, C/D, compute), `bf16bf16`, `f16f16`.
# nvjet (cuBLAS's Hopper/Blackwell GEMMs): `nvjet_[smNN_]tst_...`: the first letter is the input
# type. `t` is read as bf16 because every bf16 GEMM in the H200 fixtures is `tst`; `h` is fp16.
# Other letters stay unknown. The `_h_`/`_v_` field later in the name is not a type (bf16
# GEMMs of the same trace show both).
# Warp-level MMA shapes in cuBLAS/CUTLASS names: s16816 = fp32 accumulate, m16n8k16, etc.
_XMMA_TYPES = re.compile(r"gemm_(bf16|f16|f32|tf32|e4m3|e5m2|i8)")
_XMMA_DTYPE = {"bf16": "bf16", "f16": "fp16", "f32": "fp32", "tf32": "tf32",
               "e4m3": "fp8", "e5m2": "fp8", "i8": "int8"}
_NVJET = re.compile(r"nvjet_(?:sm(\d+)[a-z]?_)?([a-z]{3})_")
_NVJET_TILE = re.compile(r"nvjet_(?:sm\d+[a-z]?_)?[a-z]{3}_(\d+x\d+)")
_NVJET_DTYPE = {"t": "bf16", "h": "fp16"}
_MMA_SHAPE = re.compile(r"(?<![a-z0-9])([hsid])(16816|1688|884|16832|8816|161616)(?=gemm|_|$|[a-z])")
# Each decoder's first test, compiled once: every name of a trace meets most of them (re's own cache of
# compiled patterns costs a lookup per call, a tenth of decoding a name of a unique-name trace).
_FLASH_FWD = re.compile(r"(pytorch_flash|flash)::(flash_fwd\w*)")
_CUTLASS_FMHA = re.compile(r"fmha_cutlass([FB])_(\w+?)_(aligned|notaligned)_(\d+x\d+)(_rf)?_sm(\d+)")
_TRITON = re.compile(r"triton_(tem|per|red|poi|mm|bmm)_(\w+)")
_XMMA = re.compile(r"sm\d+_xmma_")
_CUBLAS_CLASSIC = re.compile(r"(ampere|volta|turing|hopper|maxwell|sm\d+)_(\w+)")
_CUTLASS_GEMM = re.compile(r"cutlass_(\d+)_(\w+)")
_GEMM_OR_GEMV = re.compile(r"gemm|gemv")


def _flash(name: str, s: str, flat: str) -> KernelInfo | None:
    if "FlashAttnFwdSm90" in s or "flash::enable_sm90" in s:  # FlashAttention-3 (Hopper, warpgroup MMA)
        return named(name, family="FlashAttention-3", library="flash-attn 3", is_attention=True, arch="sm90",
                   dtype=first_type(s), tensor_core_path="wgmma", tensor_cores=True,
                   basis="FlashAttention-3 is written for Hopper's warpgroup MMA (wgmma)")
    m = _FLASH_FWD.search(s) if "flash_fwd" in s else None
    if not m or "mla" in m.group(2):  # FlashMLA's kernels: attention_kernels names them
        return None
    traits = re.search(r"Flash_fwd_kernel_traits<(\d+), (\d+), (\d+), (\d+)", s)
    tile, notes = None, ()
    if traits:
        d, bm, bn, warps = traits.groups()
        tile = f"{bm}x{bn}"
        notes = (f"head dim {d}, {bm} query rows x {bn} key rows per block, {warps} warps",)
    dtype = first_type(s)
    # FlashAttention-2 has one code path: SM80 mma.sync m16n8k16 on 16-bit inputs, on every GPU
    # (no wgmma; that is FlashAttention-3). The name does not say it, the family does.
    tc = True if dtype in SIXTEEN_BIT else None
    return named(name, family="FlashAttention-2", library=m.group(1), is_attention=True, dtype=dtype, tile=tile,
               arch="sm80", tensor_core_path="mma.sync m16n8k16" if tc else None, tensor_cores=tc,
               basis="FlashAttention-2 computes in 16-bit on tensor cores only" if tc else None,
               notes=notes + ("arch sm80: FlashAttention-2's Ampere code path, also what runs on Hopper",))


def _cutlass_fmha(name: str, s: str, flat: str) -> KernelInfo | None:
    m = _CUTLASS_FMHA.match(flat)
    if not m:
        return None
    kind, dt, _, tile, rf, sm = m.groups()
    dtype = {"bf16": "bf16", "f16": "fp16", "f32": "fp32"}.get(dt)
    tc = True if dtype in SIXTEEN_BIT else None
    notes = ("rf: the output block is accumulated in registers",) if rf else ()
    return named(name, family="CUTLASS FMHA (xformers memory-efficient)", library="fmha_cutlass" + kind,
               is_attention=True, dtype=dtype, tile=tile, arch=f"sm{sm}",
               tensor_core_path="mma.sync" if tc else None, tensor_cores=tc,
               basis="xformers' CUTLASS kernels run 16-bit GEMMs as tensor-core MMA" if tc else None,
               notes=notes + (("forward" if kind == "F" else "backward"),))


def _cudnn(name: str, s: str, flat: str) -> KernelInfo | None:
    if not flat.startswith("cudnn"):
        return None
    # SDPA's engines, and the helpers its backward runs around them (dO.O row sums, dQ's cast to 16 bits)
    attention = ("sdpa" in flat or "fprop" in flat and "flash" in flat or "bprop" in flat and "flash" in flat
                 or "fusion::compute_dot_do_o" in flat or "fusion::convert_dq" in flat)
    paths = ("wgmma", "gmma", "hmma", "imma")
    path = next((p for p in paths if re.search(rf"(?<![a-z]){p}(?![a-z])", flat)), None)
    # cuDNN writes `f16` for 16-bit inputs in general: the bf16 fixtures run `..._wgmma_f16_...`.
    dtype = "16-bit" if re.search(r"_(f16|bf16|h)_", flat) else ("fp32" if "_f32_" in flat else None)
    knob = re.search(r"knob_(\d+)", flat)
    tile = re.search(r"knob_\d+_(\d+x\d+x\d+)", flat)
    notes = ("generated per problem by cuDNN's engine" + (f", knob {knob.group(1)}" if knob else ""),)
    if dtype == "16-bit":
        notes += ("cuDNN names both fp16 and bf16 kernels `f16`",)
    return named(name, family="cuDNN", library="cudnn_generated" if "generated" in flat else "cudnn",
               is_attention=attention, is_gemm=not attention and "gemm" in flat, dtype=dtype,
               tile=tile.group(1) if tile else tile_of(flat), arch=arch_of(flat), tensor_core_path=path,
               tensor_cores=True if path else None, basis=_basis(path), notes=notes)


def _triton(name: str, s: str, flat: str) -> KernelInfo | None:
    m = _TRITON.match(flat)
    if not m:
        return None
    kind, rest = m.groups()
    # Inductor names a kernel after the ops it fuses: one fused into an attention op is part of it (flex's
    # backward runs a persistent reduction, `triton_per_fused_flex_attention_backward_0`, beside its template);
    # flex_decoding's template has no "attention" in its name
    attention = "attention" in rest or (kind == "tem" and "flex" in rest)
    gemm = kind in ("mm", "bmm") or (kind == "tem" and re.search(r"fused_(add)?b?mm", rest) is not None)
    label = {"tem": "Triton template", "per": "Triton persistent reduction", "red": "Triton reduction",
             "poi": "Triton pointwise"}.get(kind, "Triton")
    # Triton names carry neither dtype nor architecture: tensor-core use depends on both. Unknown.
    return named(name, family=label + (" (flex_attention)" if attention else ""),
               library="triton_" + kind, is_attention=attention, is_gemm=gemm)


def _attnprof_triton(name: str, s: str, flat: str) -> KernelInfo | None:
    """attnprof's own kernels (src/attnprof/kernels/flash_attn_triton): their names are their Python functions'.
    flash_attn_triton_fwd_hopper is the Gluon forward (FA3's schedule), _fwd the plain Triton one, _bwd_* the
    backward's three passes (a row-sum preprocess, then dK/dV and dQ on tensor cores)."""
    if flat.startswith("flash_attn_triton_bwd_preprocess"):
        return named(name, family="Triton backward preprocess (attnprof flash_attn_triton)",
                     library="attnprof_triton", is_attention=True, tensor_cores=False,
                     basis="delta = rowsum(dO * O): no matrix product")
    if flat.startswith("flash_attn_triton_bwd"):
        return named(name, family="Triton backward (attnprof flash_attn_triton)", library="attnprof_triton",
                     is_attention=True, tensor_core_path="wgmma", tensor_cores=True,
                     basis="flash_attn_triton runs on sm_90+ only, where its 16-bit dots compile to wgmma")
    if not flat.startswith("flash_attn_triton_fwd"):
        return None
    if flat.startswith("flash_attn_triton_fwd_hopper"):
        return named(name, family="Gluon, FA3 schedule (attnprof flash_attn_triton)", library="attnprof_triton",
                   is_attention=True, tensor_core_path="wgmma", tensor_cores=True,
                   basis="the Gluon forward issues wgmma itself; it is built for sm_90 only",
                   notes=("128-row query tiles: a producer warpgroup (TMA) and two consumer warpgroups of 64 "
                          "rows (384 threads); key block and stages: _hopper_launch.BY_SIZE",))
    # it runs on sm_90+ only (TMA descriptors), where its dots compile to wgmma (HGMMA in the SASS)
    return named(name, family="Triton (attnprof flash_attn_triton)", library="attnprof_triton", is_attention=True,
               tensor_core_path="wgmma", tensor_cores=True,
               basis="flash_attn_triton runs on sm_90+ only, where its 16-bit dots compile to wgmma",
               notes=("tile, stages and warps are its autotuned configuration: not in the name",))


def _nvjet(name: str, s: str, flat: str) -> KernelInfo | None:
    m = _NVJET.match(flat)
    if not m:
        return None
    sm, types = m.groups()
    dtype = _NVJET_DTYPE.get(types[0])
    arch = f"sm{sm}" if sm else None
    path = None
    if dtype and arch:
        path = "wgmma" if arch.startswith("sm9") else ("tcgen05" if arch.startswith("sm10") else None)
    tile = _NVJET_TILE.match(flat)
    return named(name, family="cuBLAS (nvjet)", library="nvjet", is_gemm=True, dtype=dtype,
               tile=tile.group(1) if tile else None, arch=arch, tensor_core_path=path,
               tensor_cores=True if dtype else None,
               basis=f"nvjet with {dtype} inputs: cuBLAS's tensor-core GEMMs for Hopper+" if dtype else None)


def _mma_path(flat: str) -> tuple[str | None, bool | None, str | None]:
    """(instruction path, tensor cores?, the name token that shows it) for cuBLAS/CUTLASS names."""
    low = flat.lower()
    for p in ("wgmma", "gmma", "hmma", "imma", "wmma", "tensorop"):
        if re.search(rf"(?<![a-z]){p}", low):
            return p, True, p
    m = _MMA_SHAPE.search(low) or re.search(r"(?<![a-z])(tensor)(\d+x\d+x\d+)", low)
    if m:
        return m.group(1) + m.group(2), True, m.group(1) + m.group(2)
    m = re.search(r"(?<![a-z])(ffma|simt|sgemm|dgemm)", low)
    if m:
        return "ffma (CUDA cores)", False, m.group(1)
    return None, None, None


def _basis(token: str | None) -> str | None:
    return f"`{token}` in the name" if token else None


def _xmma(name: str, s: str, flat: str) -> KernelInfo | None:
    if not _XMMA.match(flat):
        return None
    m = _XMMA_TYPES.search(flat)
    dtype = _XMMA_DTYPE.get(m.group(1)) if m else None
    path, tc, token = _mma_path(flat)
    basis = _basis(token)
    if tc is None and dtype in SIXTEEN_BIT + ("fp8", "tf32"):  # xmma GEMMs on these types are MMA
        tc, basis = True, f"xmma GEMM with {dtype} inputs (cuBLAS runs these on tensor cores)"
    return named(name, family="cuBLAS (xmma)", library="xmma", is_gemm="gemm" in flat, dtype=dtype,
               tile=tile_of(flat), arch=arch_of(flat), tensor_core_path=path, tensor_cores=tc, basis=basis)


def _cublas_classic(name: str, s: str, flat: str) -> KernelInfo | None:
    m = _CUBLAS_CLASSIC.match(flat) if "gemm" in flat else None
    if not m:
        return None
    path, tc, token = _mma_path(flat)
    dtype = _first_dtype_word(m.group(2))
    return named(name, family="cuBLAS", library="cublas", is_gemm=True, dtype=dtype, tile=tile_of(flat),
               arch=arch_of(flat), tensor_core_path=path, tensor_cores=tc, basis=_basis(token))


def _first_dtype_word(rest: str) -> str | None:
    m = re.match(r"(bf16|fp16|f16|tf32|fp32|f32|h|s|d)(?=_|\d|gemm)", rest)
    if not m:
        return None
    return {"bf16": "bf16", "fp16": "fp16", "f16": "fp16", "h": "fp16", "tf32": "tf32", "fp32": "fp32",
            "f32": "fp32", "s": "fp32", "d": "fp64"}[m.group(1)]


def _cutlass_gemm(name: str, s: str, flat: str) -> KernelInfo | None:
    m = _CUTLASS_GEMM.search(s)
    if not m or "gemm" not in m.group(2):
        return None
    inner = m.group(0)
    path, tc, token = _mma_path(inner)
    rest = re.sub(r"^(tensorop|simt|wmma)_", "", m.group(2))
    dtype = "fp32" if "sgemm" in inner else _first_dtype_word(rest)
    return named(name, family="CUTLASS", library="cutlass", is_gemm=True, dtype=dtype, tile=tile_of(inner),
               arch=f"sm{m.group(1)}", tensor_core_path=path, tensor_cores=tc, basis=_basis(token))


def aten(name: str, s: str, flat: str) -> KernelInfo:
    base, targs = split_template(flat)
    cast_to = None
    if "copy_kernel" in flat:
        m = re.search(r"(bfloat16|float16|float8\w*)_copy_kernel_cuda", flat)
        if m:
            cast_to = {"bfloat16": "bf16", "float16": "fp16"}.get(m.group(1), m.group(1))
        else:
            lam = re.findall(r"\{lambda\(([^)]*)\)#\d+\}", flat)  # direct_copy: lambda(T) is the output type
            cast_to = ELEMENT_TYPES.get(lam[-1].strip()) if lam and "," not in lam[-1] else None
    aten = "at::native" in s or base.endswith(("softmax_warp_forward", "softmax_warp_backward"))
    gemm = bool(_GEMM_OR_GEMV.search(base.lower()))
    return named(name, family="PyTorch" if aten else None, library="aten" if aten else None, is_gemm=gemm,
               dtype=cast_to or compute_type(targs or flat), arch=arch_of(flat) if gemm else None,
               cast_to=cast_to)


# tried in this order; the first that recognises a name decodes it, else it is an aten or unknown kernel
LIBRARIES = (_flash, _cutlass_fmha, _cudnn, _attnprof_triton, _triton, attention_kernels.decode, _nvjet, _xmma,
             _cublas_classic, _cutlass_gemm)
