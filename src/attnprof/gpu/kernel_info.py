"""What `kernel_names` and `kernel_decoders` share: the KernelInfo a name decodes to, the element types
as templates spell them, and the helpers that take a name apart (its template arguments, parameter list,
architecture and tile) and shorten it. Both modules import this one; neither imports the other's private
names. Imports no torch."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache

# Element types as they appear in template arguments and lambda signatures.
_TYPE_TOKENS = (
    ("c10::BFloat16", "bf16"), ("cutlass::bfloat16_t", "bf16"), ("__nv_bfloat16", "bf16"), ("__hip_bfloat16", "bf16"),
    ("c10::Half", "fp16"), ("cutlass::half_t", "fp16"), ("__half", "fp16"),
    ("double", "fp64"), ("float", "fp32"), ("bool", "bool"), ("long", "int64"),
)
SIXTEEN_BIT = ("bf16", "fp16", "16-bit")
_TYPE_RE = re.compile(r"(?<![\w:])(" + "|".join(re.escape(t) for t, _ in _TYPE_TOKENS) + r")(?![\w])")
ELEMENT_TYPES = dict(_TYPE_TOKENS)

_LAMBDA_ARGS = re.compile(r"\{lambda\(([^()]*)\)#\d+\}")
_TILE = re.compile(r"(?<![\dx])(\d+x\d+(?:x\d+)?)(?![\dx])")
_ARCH = re.compile(r"(?<![a-z0-9])sm_?(\d{2,3})[a-z]?(?![0-9])", re.IGNORECASE)
_ARCH_WORDS = (("hopper", "sm90"), ("ampere", "sm80"), ("turing", "sm75"), ("volta", "sm70"),
               ("maxwell", "sm50"))


# slots: a trace of unique names keeps tens of thousands in decode's cache. Not frozen: a frozen dataclass sets
# each field through object.__setattr__ (3.2 against 1.0 us a KernelInfo, on every name decoded); decode's
# answers are shared, and nothing assigns to one.
@dataclass(slots=True)
class KernelInfo:
    """What a kernel name shows. None means the name does not tell. Read-only by convention (decode's cache
    shares each one)."""

    name: str
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

    @property
    def short(self) -> str:
        """`short_name(name)`, made when asked: most callers of decode read one flag of thousands of names."""
        return short_name(self.name)

    def as_dict(self) -> dict:
        d = {"name": self.name, "short": self.short, **asdict(self)}  # the keys in the order they always had
        d["notes"] = list(self.notes)
        return d


# ----------------------------------------------------------------------------------- take apart
def strip_common(name: str) -> str:
    """The name on one line, without `void ` and anonymous namespaces."""
    s = " ".join(name.split())
    s = s.replace("(anonymous namespace)::", "")
    return s[5:] if s.startswith("void ") else s


_BRACKETS = re.compile(r"[<>(]")
_ANGLES = re.compile(r"[<>]")


def drop_params(s: str) -> str:
    """Remove the trailing parameter list `(...)` that sits outside every template bracket."""
    first = s.find("(")
    if first < 0:
        return s
    if first > 0 and s.find("<", 0, first) < 0:  # nothing opens before the first "(": it is outside them
        return s[:first]
    depth, at = 0, 0
    # only the characters that matter, not every one of a long name; inside a template only its brackets
    while m := (_ANGLES if depth else _BRACKETS).search(s, at):
        ch, at = m.group(), m.end()
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif at > 1:
            return s[:at - 1]
    return s


def is_transfer(name: str) -> bool:
    """Memcpy/Memset activities: their whole name (direction, memory kinds) is meaningful."""
    return name.startswith(("Memcpy", "Memset"))


# ----------------------------------------------------------------------------------- short name
_WRAPPERS = ("cutlass::Kernel", "cutlass::Kernel2", "cutlass::device_kernel", "device_kernel")
# Both match only from a word's start; saying so (\b first) spares re trying every later start of every
# word, each a backtrack over the word's rest (quadratic in a word's length: 60 us of a long aten name).
_INNER_OP = re.compile(r"\b(\w+_kernel(?:_cuda|_impl)?)\b")
_FUNCTOR = re.compile(r"\b(\w*Functor\w*|\w+Ops)\b")
_ENABLE_SM = re.compile(r"enable_sm\d+_or_later$")
_ATEN_NAMESPACE = re.compile(r"^(at::native::|at::cuda::|at::)")
_GENERIC = {"gpu_kernel_impl_nocast", "gpu_kernel_impl", "elementwise_kernel", "unrolled_elementwise_kernel",
            "vectorized_elementwise_kernel", "elementwise_kernel_helper", "launch_kernel"}


def split_template(s: str) -> tuple[str, str]:
    """(function name before the template arguments, the template arguments)."""
    i = s.find("<")
    return (s, "") if i < 0 else (s[:i], s[i + 1 : s.rfind(">")] if ">" in s else s[i + 1 :])


# A trace repeats a few hundred names thousands of times; one of unique names (a name per launch) has tens of
# thousands, which every rule walks in turn: a smaller cache would miss on every call (5x json.load's time
# on a 67 MB trace of unique names with 8,192).
NAMES_CACHED = 1 << 16


@lru_cache(maxsize=NAMES_CACHED)
def short_name(name: str) -> str:
    """A readable name: `elementwise_kernel[masked_fill_kernel]`, `flash_fwd_kernel`, the name itself."""
    if is_transfer(name):
        return " ".join(name.split())
    outer, targs = split_template(drop_params(strip_common(name)))
    base = outer
    while base in _WRAPPERS or "enable_sm" in base and _ENABLE_SM.search(base):
        # cutlass::Kernel2<cutlass_80_simt_sgemm_...>, device_kernel<enable_sm90_or_later<X>>: X names it
        if not targs:
            break
        base, targs = split_template(drop_params(targs.strip()))
    if base != outer:
        return base
    base = _ATEN_NAMESPACE.sub("", base) if base.startswith("at::") else base
    if not targs:
        return base
    inner = [m for m in _INNER_OP.findall(targs) if m not in _GENERIC and m != base.split("::")[-1]]
    if inner:
        return f"{base}[{inner[0]}]"
    functors = _FUNCTOR.findall(targs)
    return f"{base}[{functors[-1]}]" if functors else base


# ----------------------------------------------------------------------------------- fields
def first_type(targs: str) -> str | None:
    m = _TYPE_RE.search(targs)
    return ELEMENT_TYPES[m.group(1)] if m else None


def compute_type(targs: str) -> str | None:
    """PyTorch kernels: the element type of the functor's lambda (`{lambda(c10::BFloat16, bool)#1}`),
    preferring a floating type over the bool/index arguments; else the first type in the template."""
    for sig in reversed(_LAMBDA_ARGS.findall(targs)):
        types = [ELEMENT_TYPES.get(t.strip()) for t in sig.split(",") if t.strip()]
        floats = [t for t in types if t and t.startswith(("bf", "fp"))]
        if floats or any(types):
            return floats[0] if floats else next(t for t in types if t)
    return first_type(targs)


def arch_of(s: str) -> str | None:
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


def tile_of(flat: str) -> str | None:
    m = re.search(r"tilesize(\d+x\d+(?:x\d+)?)", flat)
    if m:
        return m.group(1)
    m = _TILE.search(flat)
    return m.group(1) if m else None


def named(name: str, **fields) -> KernelInfo:
    """The KernelInfo of `name` with the fields a decoder read."""
    return KernelInfo(name, **fields)
