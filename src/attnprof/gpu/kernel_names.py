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
    from attnprof.gpu import kernel_decoders as by  # they build on this module's helpers

    s = _strip_common(name)
    flat = _drop_params(s)
    for decoder in by.LIBRARIES:
        info = decoder(name, s, flat)
        if info is not None:
            return info
    return by.aten(name, s, flat)


def _mk(name: str, **kw) -> KernelInfo:
    return KernelInfo(name, short_name(name), **kw)
