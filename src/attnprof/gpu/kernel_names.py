"""Read what a GPU kernel's name says about it. Imports no torch.

Kernel names are the only description of a kernel a trace carries, and each library encodes
different facts in them: cuBLAS puts the architecture, the element types and the instruction
path in the name (`sm80_xmma_gemm_f32f32_..._ffma`), CUTLASS and xformers the tile
(`fmha_cutlassF_bf16_aligned_64x64_rf_sm80`), cuDNN the architecture and MMA path
(`cudnn_generated_..._sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_...`), FlashAttention its
traits as template arguments, Triton almost nothing. `decode` reads what is there and leaves
the rest as None: a field that the name does not show stays unknown.

`normalize` turns a name into a key for matching the same kernel across two runs: template
noise (integer template arguments such as vector widths and log2 sizes, lambda indices,
hex addresses, the parameter list, Triton's trailing kernel index) is removed, the parts
that identify the kernel (function, functor, element types, tile) are kept.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache

# Element types as they appear in template arguments and lambda signatures.
_TYPE_TOKENS = (
    ("c10::BFloat16", "bf16"), ("cutlass::bfloat16_t", "bf16"), ("__nv_bfloat16", "bf16"),
    ("c10::Half", "fp16"), ("cutlass::half_t", "fp16"), ("__half", "fp16"),
    ("double", "fp64"), ("float", "fp32"), ("bool", "bool"), ("long", "int64"),
)
SIXTEEN_BIT = ("bf16", "fp16", "16-bit")
_TYPE_RE = re.compile(r"(?<![\w:])(" + "|".join(re.escape(t) for t, _ in _TYPE_TOKENS) + r")(?![\w])")
_TYPE_MAP = dict(_TYPE_TOKENS)

# cuBLAS/cuBLASLt xmma type fields: `gemm_f32f32_f32f32_f32` (A/B, C/D, compute), `bf16bf16`, `f16f16`.
_XMMA_TYPES = re.compile(r"gemm_(bf16|f16|f32|tf32|e4m3|e5m2|i8)")
_XMMA_DTYPE = {"bf16": "bf16", "f16": "fp16", "f32": "fp32", "tf32": "tf32",
               "e4m3": "fp8", "e5m2": "fp8", "i8": "int8"}
# nvjet (cuBLAS's Hopper/Blackwell GEMMs): `nvjet_[smNN_]tst_...`: the first letter is the input
# type. `t` is read as bf16 because every bf16 GEMM in the H200 fixtures is `tst`; `h` is fp16.
# Other letters stay unknown. The `_h_`/`_v_` field later in the name is not a type (bf16
# GEMMs of the same trace show both).
_NVJET = re.compile(r"nvjet_(?:sm(\d+)[a-z]?_)?([a-z]{3})_")
_NVJET_DTYPE = {"t": "bf16", "h": "fp16"}
# Warp-level MMA shapes in cuBLAS/CUTLASS names: s16816 = fp32 accumulate, m16n8k16, etc.
_MMA_SHAPE = re.compile(r"(?<![a-z0-9])([hsid])(16816|1688|884|16832|8816|161616)(?=gemm|_|$|[a-z])")
_TILE = re.compile(r"(?<![\dx])(\d+x\d+(?:x\d+)?)(?![\dx])")
_ARCH = re.compile(r"(?<![a-z0-9])sm_?(\d{2,3})[a-z]?(?![0-9])", re.IGNORECASE)
_ARCH_WORDS = (("hopper", "sm90"), ("ampere", "sm80"), ("turing", "sm75"), ("volta", "sm70"),
               ("maxwell", "sm50"))


@dataclass(frozen=True)
class KernelInfo:
    """What a kernel name shows. None means the name does not tell."""

    name: str
    short: str
    family: str | None = None  # e.g. "FlashAttention-2", "cuBLAS", "PyTorch elementwise"
    library: str | None = None  # the marker it was recognised by, e.g. "pytorch_flash"
    is_gemm: bool = False
    is_attention: bool = False
    dtype: str | None = None  # element type the kernel computes on (bf16, fp16, fp32, 16-bit, ...)
    tile: str | None = None
    arch: str | None = None  # target architecture in the name (sm80, sm90)
    tensor_core_path: str | None = None  # wgmma, gmma, s16816, hmma, wmma, mma.sync, ffma (CUDA cores)
    tensor_cores: bool | None = None
    basis: str | None = None  # why tensor_cores is what it is
    cast_to: str | None = None  # for copy kernels: the element type they write
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["notes"] = list(self.notes)
        return d


# ----------------------------------------------------------------------------------- normalise
def _strip_common(name: str) -> str:
    s = " ".join(name.split())
    s = s.replace("(anonymous namespace)::", "")
    return s[5:] if s.startswith("void ") else s


_BRACKETS = re.compile(r"[<>(]")


def _drop_params(s: str) -> str:
    """Remove the trailing parameter list `(...)` that sits outside every template bracket."""
    depth = 0
    for m in _BRACKETS.finditer(s):  # only the characters that matter, not every one of a long name
        ch, i = m.group(), m.start()
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0 and i > 0:
            return s[:i]
    return s


def is_transfer(name: str) -> bool:
    """Memcpy/Memset activities: their whole name (direction, memory kinds) is meaningful."""
    return name.startswith(("Memcpy", "Memset"))


@lru_cache(maxsize=8192)  # a trace repeats a few hundred names thousands of times
def normalize(name: str) -> str:
    """A matching key for `name`: the same kernel gets the same key across runs and traces."""
    if is_transfer(name):
        return " ".join(name.split())
    s = _drop_params(_strip_common(name))
    s = re.sub(r"0x[0-9a-fA-F]+", "0x?", s)
    s = re.sub(r"#\d+", "#", s)  # lambda indices
    # Integer template arguments (vector widths, unroll counts, log2 sizes): not identity.
    s = re.sub(r"(?<![\w.])\d+(?:u|ul|l|ll|ull)?(?![\w.])", "N", s)
    s = re.sub(r"^(triton_\w+?)_\d+$", r"\1", s)  # Triton's per-graph kernel index
    return s


# ----------------------------------------------------------------------------------- short name
_WRAPPERS = ("cutlass::Kernel", "cutlass::Kernel2", "cutlass::device_kernel", "device_kernel")
_INNER_OP = re.compile(r"(\w+_kernel(?:_cuda|_impl)?)\b")
_FUNCTOR = re.compile(r"(\w*Functor\w*|\w+Ops)\b")
_GENERIC = {"gpu_kernel_impl_nocast", "gpu_kernel_impl", "elementwise_kernel", "unrolled_elementwise_kernel",
            "vectorized_elementwise_kernel", "elementwise_kernel_helper", "launch_kernel"}


def _base(s: str) -> tuple[str, str]:
    """(function name before the template arguments, the template arguments)."""
    i = s.find("<")
    return (s, "") if i < 0 else (s[:i], s[i + 1 : s.rfind(">")] if ">" in s else s[i + 1 :])


@lru_cache(maxsize=8192)  # a trace repeats a few hundred names thousands of times
def short_name(name: str) -> str:
    """A readable name: `elementwise_kernel[masked_fill_kernel]`, `flash_fwd_kernel`, the name itself."""
    if is_transfer(name):
        return " ".join(name.split())
    s = _drop_params(_strip_common(name))
    base, targs = _base(s)
    while base in _WRAPPERS or re.search(r"enable_sm\d+_or_later$", base):
        # cutlass::Kernel2<cutlass_80_simt_sgemm_...>, device_kernel<enable_sm90_or_later<X>>: X names it
        if not targs:
            break
        base, targs = _base(_drop_params(targs.strip()))
    if base != _base(s)[0]:
        return base
    base = re.sub(r"^(at::native::|at::cuda::|at::)", "", base)
    if not targs:
        return base
    inner = [m for m in _INNER_OP.findall(targs) if m not in _GENERIC and m != base.split("::")[-1]]
    functors = _FUNCTOR.findall(targs)
    pick = inner[0] if inner else (functors[-1] if functors else None)
    return f"{base}[{pick}]" if pick else base


def distinct_short_names(names: list[str]) -> list[str]:
    """`short_name` of each, made distinct: two different kernels that shorten alike (one elementwise
    kernel for bf16 and one for fp32) get their element type, then a number, so no table shows two rows
    that read the same."""
    shorts = [short_name(n) for n in names]
    clashing = {s for s in shorts if shorts.count(s) > 1}
    typed = [f"{s} ({decode(n).dtype or '?'})" if s in clashing else s for n, s in zip(names, shorts, strict=True)]
    seen: dict[str, int] = {}
    out = []
    for label in typed:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if typed.count(label) == 1 else f"{label} #{seen[label]}")
    return out


# ----------------------------------------------------------------------------------- decode
def _first_type(targs: str) -> str | None:
    m = _TYPE_RE.search(targs)
    return _TYPE_MAP[m.group(1)] if m else None


def _compute_type(targs: str) -> str | None:
    """PyTorch kernels: the element type of the functor's lambda (`{lambda(c10::BFloat16, bool)#1}`),
    preferring a floating type over the bool/index arguments; else the first type in the template."""
    for sig in reversed(re.findall(r"\{lambda\(([^()]*)\)#\d+\}", targs)):
        types = [_TYPE_MAP.get(t.strip()) for t in sig.split(",") if t.strip()]
        floats = [t for t in types if t and t.startswith(("bf", "fp"))]
        if floats or any(types):
            return floats[0] if floats else next(t for t in types if t)
    return _first_type(targs)


def _arch(s: str) -> str | None:
    m = _ARCH.search(s)
    if m:
        return f"sm{m.group(1)}"
    m = re.search(r"cutlass_(\d{2,3})_", s)
    if m:
        return f"sm{m.group(1)}"
    m = re.search(r"cutlass::arch::Sm(\d{2,3})", s)
    if m:
        return f"sm{m.group(1)}"
    low = s.lower()
    return next((arch for word, arch in _ARCH_WORDS if low.startswith(word + "_")), None)


def _tile(flat: str) -> str | None:
    m = re.search(r"tilesize(\d+x\d+(?:x\d+)?)", flat)
    if m:
        return m.group(1)
    m = _TILE.search(flat)
    return m.group(1) if m else None


@lru_cache(maxsize=8192)  # a trace repeats a few hundred names thousands of times
def decode(name: str) -> KernelInfo:
    """Everything `name` says about its kernel; unknown fields stay None."""
    if is_transfer(name):
        return KernelInfo(name, short_name(name), family="memcpy" if name.startswith("Memcpy") else "memset")
    s = _strip_common(name)
    flat = _drop_params(s)
    for decoder in (_flash, _cutlass_fmha, _cudnn, _attnprof_triton, _triton, _nvjet, _xmma, _cublas_classic,
                    _cutlass_gemm):
        info = decoder(name, s, flat)
        if info is not None:
            return info
    return _aten(name, s, flat)


def _mk(name: str, **kw) -> KernelInfo:
    return KernelInfo(name, short_name(name), **kw)


def _flash(name: str, s: str, flat: str) -> KernelInfo | None:
    if "FlashAttnFwdSm90" in s or "flash::enable_sm90" in s:  # FlashAttention-3 (Hopper, warpgroup MMA)
        return _mk(name, family="FlashAttention-3", library="flash-attn 3", is_attention=True, arch="sm90",
                   dtype=_first_type(s), tensor_core_path="wgmma", tensor_cores=True,
                   basis="FlashAttention-3 is written for Hopper's warpgroup MMA (wgmma)")
    m = re.search(r"(pytorch_flash|flash)::(flash_fwd\w*)", s)
    if not m:
        return None
    traits = re.search(r"Flash_fwd_kernel_traits<(\d+), (\d+), (\d+), (\d+)", s)
    tile, notes = None, ()
    if traits:
        d, bm, bn, warps = traits.groups()
        tile = f"{bm}x{bn}"
        notes = (f"head dim {d}, {bm} query rows x {bn} key rows per block, {warps} warps",)
    dtype = _first_type(s)
    # FlashAttention-2 has one code path: SM80 mma.sync m16n8k16 on 16-bit inputs, on every GPU
    # (no wgmma; that is FlashAttention-3). The name does not say it, the family does.
    tc = True if dtype in SIXTEEN_BIT else None
    return _mk(name, family="FlashAttention-2", library=m.group(1), is_attention=True, dtype=dtype, tile=tile,
               arch="sm80", tensor_core_path="mma.sync m16n8k16" if tc else None, tensor_cores=tc,
               basis="FlashAttention-2 computes in 16-bit on tensor cores only" if tc else None,
               notes=notes + ("arch sm80: FlashAttention-2's Ampere code path, also what runs on Hopper",))


def _cutlass_fmha(name: str, s: str, flat: str) -> KernelInfo | None:
    m = re.match(r"fmha_cutlass([FB])_(\w+?)_(aligned|notaligned)_(\d+x\d+)(_rf)?_sm(\d+)", flat)
    if not m:
        return None
    kind, dt, _, tile, rf, sm = m.groups()
    dtype = {"bf16": "bf16", "f16": "fp16", "f32": "fp32"}.get(dt)
    tc = True if dtype in SIXTEEN_BIT else None
    notes = ("rf: the output block is accumulated in registers",) if rf else ()
    return _mk(name, family="CUTLASS FMHA (xformers memory-efficient)", library="fmha_cutlass" + kind,
               is_attention=True, dtype=dtype, tile=tile, arch=f"sm{sm}",
               tensor_core_path="mma.sync" if tc else None, tensor_cores=tc,
               basis="xformers' CUTLASS kernels run 16-bit GEMMs as tensor-core MMA" if tc else None,
               notes=notes + (("forward" if kind == "F" else "backward"),))


def _cudnn(name: str, s: str, flat: str) -> KernelInfo | None:
    if not flat.startswith("cudnn"):
        return None
    attention = "sdpa" in flat or "fprop" in flat and "flash" in flat or "bprop" in flat and "flash" in flat
    paths = ("wgmma", "gmma", "hmma", "imma")
    path = next((p for p in paths if re.search(rf"(?<![a-z]){p}(?![a-z])", flat)), None)
    # cuDNN writes `f16` for 16-bit inputs in general: the bf16 fixtures run `..._wgmma_f16_...`.
    dtype = "16-bit" if re.search(r"_(f16|bf16|h)_", flat) else ("fp32" if "_f32_" in flat else None)
    knob = re.search(r"knob_(\d+)", flat)
    tile = re.search(r"knob_\d+_(\d+x\d+x\d+)", flat)
    notes = ("generated per problem by cuDNN's engine" + (f", knob {knob.group(1)}" if knob else ""),)
    if dtype == "16-bit":
        notes += ("cuDNN names both fp16 and bf16 kernels `f16`",)
    return _mk(name, family="cuDNN", library="cudnn_generated" if "generated" in flat else "cudnn",
               is_attention=attention, is_gemm=not attention and "gemm" in flat, dtype=dtype,
               tile=tile.group(1) if tile else _tile(flat), arch=_arch(flat), tensor_core_path=path,
               tensor_cores=True if path else None, basis=_basis(path), notes=notes)


def _triton(name: str, s: str, flat: str) -> KernelInfo | None:
    m = re.match(r"triton_(tem|per|red|poi|mm|bmm)_(\w+)", flat)
    if not m:
        return None
    kind, rest = m.groups()
    attention = "attention" in rest
    gemm = kind in ("mm", "bmm") or (kind == "tem" and re.search(r"fused_(add)?b?mm", rest) is not None)
    label = {"tem": "Triton template", "per": "Triton persistent reduction", "red": "Triton reduction",
             "poi": "Triton pointwise"}.get(kind, "Triton")
    # Triton names carry neither dtype nor architecture: tensor-core use depends on both. Unknown.
    return _mk(name, family=label + (" (flex_attention)" if "flex_attention" in rest else ""),
               library="triton_" + kind, is_attention=attention, is_gemm=gemm)


def _attnprof_triton(name: str, s: str, flat: str) -> KernelInfo | None:
    """attnprof's own kernel (src/attnprof/kernels/flash_attn_triton): its name is its Python function's."""
    if not flat.startswith("flash_attn_triton_fwd"):
        return None
    # it runs on sm_90+ only (TMA descriptors), where its dots compile to wgmma (HGMMA in the SASS)
    return _mk(name, family="Triton (attnprof flash_attn_triton)", library="attnprof_triton", is_attention=True,
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
    tile = re.match(r"nvjet_(?:sm\d+[a-z]?_)?[a-z]{3}_(\d+x\d+)", flat)
    return _mk(name, family="cuBLAS (nvjet)", library="nvjet", is_gemm=True, dtype=dtype,
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
    if not re.match(r"sm\d+_xmma_", flat):
        return None
    m = _XMMA_TYPES.search(flat)
    dtype = _XMMA_DTYPE.get(m.group(1)) if m else None
    path, tc, token = _mma_path(flat)
    basis = _basis(token)
    if tc is None and dtype in SIXTEEN_BIT + ("fp8", "tf32"):  # xmma GEMMs on these types are MMA
        tc, basis = True, f"xmma GEMM with {dtype} inputs (cuBLAS runs these on tensor cores)"
    return _mk(name, family="cuBLAS (xmma)", library="xmma", is_gemm="gemm" in flat, dtype=dtype,
               tile=_tile(flat), arch=_arch(flat), tensor_core_path=path, tensor_cores=tc, basis=basis)


def _cublas_classic(name: str, s: str, flat: str) -> KernelInfo | None:
    m = re.match(r"(ampere|volta|turing|hopper|maxwell|sm\d+)_(\w+)", flat)
    if not m or "gemm" not in flat:
        return None
    path, tc, token = _mma_path(flat)
    dtype = _first_dtype_word(m.group(2))
    return _mk(name, family="cuBLAS", library="cublas", is_gemm=True, dtype=dtype, tile=_tile(flat),
               arch=_arch(flat), tensor_core_path=path, tensor_cores=tc, basis=_basis(token))


def _first_dtype_word(rest: str) -> str | None:
    m = re.match(r"(bf16|fp16|f16|tf32|fp32|f32|h|s|d)(?=_|\d|gemm)", rest)
    if not m:
        return None
    return {"bf16": "bf16", "fp16": "fp16", "f16": "fp16", "h": "fp16", "tf32": "tf32", "fp32": "fp32",
            "f32": "fp32", "s": "fp32", "d": "fp64"}[m.group(1)]


def _cutlass_gemm(name: str, s: str, flat: str) -> KernelInfo | None:
    m = re.search(r"cutlass_(\d+)_(\w+)", s)
    if not m or "gemm" not in m.group(2):
        return None
    inner = m.group(0)
    path, tc, token = _mma_path(inner)
    rest = re.sub(r"^(tensorop|simt|wmma)_", "", m.group(2))
    dtype = "fp32" if "sgemm" in inner else _first_dtype_word(rest)
    return _mk(name, family="CUTLASS", library="cutlass", is_gemm=True, dtype=dtype, tile=_tile(inner),
               arch=f"sm{m.group(1)}", tensor_core_path=path, tensor_cores=tc, basis=_basis(token))


def _aten(name: str, s: str, flat: str) -> KernelInfo:
    base, targs = _base(flat)
    cast_to = None
    if "copy_kernel" in flat:
        m = re.search(r"(bfloat16|float16|float8\w*)_copy_kernel_cuda", flat)
        if m:
            cast_to = {"bfloat16": "bf16", "float16": "fp16"}.get(m.group(1), m.group(1))
        else:
            lam = re.findall(r"\{lambda\(([^)]*)\)#\d+\}", flat)  # direct_copy: lambda(T) is the output type
            cast_to = _TYPE_MAP.get(lam[-1].strip()) if lam and "," not in lam[-1] else None
    aten = "at::native" in s or base.endswith(("softmax_warp_forward", "softmax_warp_backward"))
    gemm = bool(re.search(r"gemm|gemv", base.lower()))
    return _mk(name, family="PyTorch" if aten else None, library="aten" if aten else None, is_gemm=gemm,
               dtype=cast_to or _compute_type(targs or flat), arch=_arch(flat) if gemm else None,
               cast_to=cast_to)
