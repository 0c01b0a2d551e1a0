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
from functools import lru_cache

import numpy as np

from attnprof.gpu import kernel_decoders as decoders
from attnprof.gpu.kernel_info import (
    NAMES_CACHED,
    SIXTEEN_BIT,
    KernelInfo,
    drop_params,
    is_transfer,
    short_name,
    strip_common,
)
from attnprof.trace.utf8_runs import holding

__all__ = ["ATTENTION", "GEMM", "SIXTEEN_BIT", "KernelInfo", "could_be", "could_be_each", "decode",
           "distinct_short_names", "is_attention", "is_gemm", "is_transfer", "normalize", "short_name"]

# The parts of a name without which no decoder says GEMM or attention (kernel_decoders: every is_gemm and
# is_attention it sets rests on one of these, in the name as strip_common leaves it; aten's GEMM test is
# case-blind, so they are looked for in the lowered name). A trace of unique names has tens of thousands of
# kernel names, most neither.
_GEMM_PARTS = ("gemm", "gemv", "nvjet", "triton")
_ATTENTION_PARTS = ("flash", "fmha", "att", "flex_", "bwd_", "kvcache", "mergestates", "reduce_segments",
                    "cudnn", "sage_")  # "att": attn and attention; "cudnn": its SDPA engines and their fusion
# helpers; "sage_": aiter's SageAttention kernel (`sage_fwd`)


@lru_cache(maxsize=NAMES_CACHED)
def normalize(name: str) -> str:
    """A matching key for `name`: the same kernel gets the same key across runs and traces."""
    if is_transfer(name):
        return " ".join(name.split())
    s = drop_params(strip_common(name))
    s = re.sub(r"0x[0-9a-fA-F]+", "0x?", s)
    s = re.sub(r"#\d+", "#", s)  # lambda indices
    # Integer template arguments (vector widths, unroll counts, log2 sizes): not identity.
    s = re.sub(r"(?<![\w.])\d+(?:u|ul|l|ll|ull)?(?![\w.])", "N", s)
    s = re.sub(r"^(triton_\w+?)_\d+$", r"\1", s)  # Triton's per-graph kernel index
    return s


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


def is_gemm(name: str) -> bool:
    """`decode(name).is_gemm`, decoding only names that could be a GEMM's."""
    return bool(could_be(name) & GEMM) and decode(name).is_gemm


def is_attention(name: str) -> bool:
    """`decode(name).is_attention`, decoding only names that could be a fused attention kernel's."""
    return bool(could_be(name) & ATTENTION) and decode(name).is_attention


GEMM, ATTENTION = 1, 2  # the bits of `could_be`


@lru_cache(maxsize=NAMES_CACHED)  # every rule that looks for GEMMs or attention asks of every kernel name
def could_be(name: str) -> int:
    """GEMM | ATTENTION: what `name` could be, by the parts of it the decoders need. Only strip_common's
    removal of "(anonymous namespace)::" can join two pieces of a name into such a part (its other changes
    are to spaces, which no part has), so the name is stripped first only where it has that."""
    low = (strip_common(name) if "(anonymous" in name else name).lower()
    has = low.__contains__
    return (GEMM if any(map(has, _GEMM_PARTS)) else 0) | (ATTENTION if any(map(has, _ATTENTION_PARTS)) else 0)


_ANONYMOUS = b"(anonymous namespace)::"


def could_be_each(data: bytes, ends: np.ndarray) -> np.ndarray:
    """`could_be` of each name of `data` (uint8), the names' UTF-8 bytes each followed by one byte no part
    holds (`Names.joined`), a name ending at each of `ends`: one search of all the names per part, not a
    Python test per name (a trace of unique names has tens of thousands of kernel names, most neither).
    As `could_be` does, the parts are looked for in the lowered name with "(anonymous namespace)::" taken
    out: there `bytes.replace` and `bytes.lower` do what strip_common and `str.lower` do, except for names
    with a byte past ASCII (`str.lower` lowers more) and names where "(anonymous" does not start that exact
    text (strip_common closes up spaces first); those few are tested one by one."""
    out = np.zeros(len(ends), np.uint8)
    if not len(ends):
        return out
    removed = _count_in(data, _ANONYMOUS, ends)
    one_by_one = np.zeros(len(ends), np.bool_)
    if data.count(b"(anonymous") != removed.sum():  # (each of those texts has one: else none differs)
        one_by_one = _count_in(data, b"(anonymous", ends) != removed
    if not data.isascii():
        one_by_one[np.searchsorted(ends, np.flatnonzero(np.frombuffer(data, np.uint8) >= 0x80), side="right")] = True
    low = data.replace(_ANONYMOUS, b"").lower()
    low_ends = (ends - len(_ANONYMOUS) * np.cumsum(removed)).tolist()  # (a list: `holding` bisects it per hit)
    for bit, parts in ((GEMM, _GEMM_PARTS), (ATTENTION, _ATTENTION_PARTS)):
        for part in parts:
            out[holding(low, part.encode(), low_ends)] |= bit
    starts = np.concatenate(([0], ends[:-1] + 1))
    for k in np.flatnonzero(one_by_one).tolist():
        out[k] = could_be(data[starts[k]:ends[k]].decode("utf-8", "surrogatepass"))
    return out


def _count_in(data: bytes, text: bytes, ends: np.ndarray) -> np.ndarray:
    """Per name: how many times `text` is in it (not overlapping; `text` holds no separator)."""
    at = [m.start() for m in re.finditer(re.escape(text), data)] if text in data else []
    return np.bincount(np.searchsorted(ends, at, side="right"), minlength=len(ends))[:len(ends)]


@lru_cache(maxsize=NAMES_CACHED)
def decode(name: str) -> KernelInfo:
    """Everything `name` says about its kernel; unknown fields stay None."""
    if is_transfer(name):
        return KernelInfo(name, family="memcpy" if name.startswith("Memcpy") else "memset")
    s = strip_common(name)
    flat = drop_params(s)
    for decoder in decoders.LIBRARIES:
        info = decoder(name, s, flat)
        if info is not None:
            return info
    return decoders.aten(name, s, flat)
