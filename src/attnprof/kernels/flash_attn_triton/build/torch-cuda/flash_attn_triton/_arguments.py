"""Checks of the arguments the kernels trust: what a launch would read out of bounds or compute wrong with.

Host values (windows, document lengths, max_seqlen, an int cache length) are checked on every call: a few
hundred nanoseconds. Values on the device (cu_seqlens, a cache_seqlens tensor) are summed up by one small
reduction and read back by one synchronisation, done once per tensor object and version: a packed batch's
cu_seqlens, made once per step and passed to every layer, costs one synchronisation a step, not one a layer
(flash-attn's varlen callers already synchronise once a step to get max_seqlen as a host int). A tensor
changed in place has a new version and is checked again. validate=False skips these device checks (the
caller vouches for the values); under CUDA graph capture they are skipped too, since a capture cannot
synchronise and a replay reads whatever the tensor then holds.
"""

from __future__ import annotations

import numbers
import operator
import weakref

import torch


def as_int(value, name: str) -> int:
    """value as an int (NumPy integers and 0-d integer tensors too); a float or a bool is refused."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise ValueError(f"{name} must be an int; got {type(value).__name__} {value!r}")


def check_window(window_size) -> tuple[int, int]:
    """flash-attn's window_size=(left, right): exactly two ints, each >= 0 or -1 (no limit)."""
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise ValueError(f"window_size must be (left, right); got {window_size!r}")
    left, right = (as_int(w, "window_size's entries") for w in window_size)
    if left < -1 or right < -1:
        raise ValueError(f"window_size's entries must be >= 0, or -1 for no limit; got {window_size!r}")
    return left, right


def check_positive(value, name: str) -> int:
    """An int > 0 (document_len, max_seqlen)."""
    number = as_int(value, name)
    if number <= 0:
        raise ValueError(f"{name} must be a positive int; got {value!r}")
    return number


def check_scale_value(sm_scale, name: str) -> None:
    """A real number (int, float, NumPy float): a bool, a string or a tensor is refused."""
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, numbers.Real):
        raise ValueError(f"{name} must be a real number; got {type(sm_scale).__name__} {sm_scale!r}")


def capturing(t: torch.Tensor) -> bool:
    """Whether t's values cannot be read now: a CUDA tensor under graph capture. Asked only of tensors not
    checked before (the two CUDA queries cost microseconds of host time a call: H200,
    benchmarks/kernel/triton_vs_cudnn.py --part validate gave 71.9 us a call with them asked every call, 59.8 with
    validate=False)."""
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


class _Checked:
    """Device tensors whose values passed a check, by object and version (never by address: a new tensor
    may reuse a freed one's memory), with what they were checked against."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[tuple[weakref.ref, ...], tuple, tuple]] = {}

    def has(self, tensors: tuple[torch.Tensor, ...], against: tuple) -> bool:
        entry = self._seen.get(id(tensors[0]))
        versions = _versions(tensors)
        return (versions is not None and entry is not None and entry[1:] == (versions, against)
                and all(ref() is t for ref, t in zip(entry[0], tensors, strict=True)))

    def add(self, tensors: tuple[torch.Tensor, ...], against: tuple) -> None:
        versions = _versions(tensors)
        if versions is not None:
            key = id(tensors[0])
            refs = tuple(weakref.ref(t, lambda _, key=key: self._seen.pop(key, None)) for t in tensors)
            self._seen[key] = (refs, versions, against)


def _versions(tensors: tuple[torch.Tensor, ...]) -> tuple[int, ...] | None:
    """The tensors' version counters; None for inference tensors, which keep none (checked on every call)."""
    try:
        return tuple(t._version for t in tensors)
    except RuntimeError:
        return None


_CHECKED = _Checked()


def _bounds(cu: torch.Tensor) -> torch.Tensor:
    """[first, last, shortest, longest] of one cu_seqlens, on its device."""
    lengths = cu[1:] - cu[:-1]
    return torch.stack([cu[0], cu[-1], lengths.min(), lengths.max()]).long()


def check_cu_seqlens(cu_q: torch.Tensor, cu_k: torch.Tensor, totals: tuple[int, int], max_seqlens: tuple[int, int],
                     validate: bool = True) -> None:
    """cu_seqlens_q / _k: start at 0, never decrease, end at the tokens q / k hold, and no sequence is longer
    than its max_seqlen (the launch's grid covers max_seqlen rows). One synchronisation per tensor version."""
    for name, cu in (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k)):
        if cu.numel() < 2:
            raise ValueError(f"{name} must hold at least one sequence (two offsets); got {cu.numel()}")
    against = (totals, max_seqlens)
    if not validate or _CHECKED.has((cu_q, cu_k), against) or capturing(cu_q):
        return
    bounds = torch.cat([_bounds(cu_q), _bounds(cu_k)]).tolist()  # the one synchronisation
    for side, (first, last, shortest, longest), total, max_seqlen in zip(
            "qk", (bounds[:4], bounds[4:]), totals, max_seqlens, strict=True):
        name = f"cu_seqlens_{side}"
        if first != 0 or shortest < 0:
            raise ValueError(f"{name} must start at 0 and never decrease; got first {first}, a step of {shortest}")
        if last != total:
            raise ValueError(f"{name} must end at the {total} tokens {side} holds; it ends at {last}")
        if longest > max_seqlen:
            raise ValueError(f"max_seqlen_{side} ({max_seqlen}) is below the longest sequence ({longest})")
    _CHECKED.add((cu_q, cu_k), against)


def check_cache_seqlens(cache_seqlens: torch.Tensor, room: int, validate: bool = True) -> None:
    """0 <= cache_seqlens <= room (the cache's slots less the new keys to append). One synchronisation per
    tensor version."""
    if not validate or _CHECKED.has((cache_seqlens,), (room,)) or capturing(cache_seqlens):
        return
    if cache_seqlens.numel():
        low, high = torch.stack([cache_seqlens.min(), cache_seqlens.max()]).tolist()
        if low < 0 or high > room:
            raise ValueError(f"cache_seqlens must lie in 0..{room} (the cache's slots less the new keys); "
                             f"got {low}..{high}")
    _CHECKED.add((cache_seqlens,), (room,))


def check_softcap(softcap) -> float:
    """Gemma-2's logit cap: a real number >= 0, finite (0: no capping)."""
    check_scale_value(softcap, "softcap")
    cap = float(softcap)
    if not 0 <= cap < float("inf"):
        raise ValueError(f"softcap must be >= 0 and finite (0: none); got {softcap!r}")
    return cap


def sink_logits(learnable_sink, q_heads: int, device: torch.device) -> torch.Tensor | None:
    """gpt-oss's learnable sinks, one logit per query head ([Hq], any float dtype, on q's device), as the
    float32 contiguous tensor the kernels read (a differentiable copy: the gradient reaches the caller's)."""
    if learnable_sink is None:
        return None
    if (not isinstance(learnable_sink, torch.Tensor) or not learnable_sink.is_floating_point()
            or learnable_sink.shape != (q_heads,) or learnable_sink.device != device):
        raise ValueError(f"learnable_sink must be a float tensor of shape ({q_heads},) (one logit per query head) "
                         f"on q's device; got {learnable_sink!r:.80}")
    return learnable_sink.float().contiguous()


def check_block_table(block_table: torch.Tensor, batch: int, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      block_n: int, validate: bool = True) -> None:
    """A paged cache (flash-attn's block_table): the table int32 [batch, pages a sequence] on the cache's device,
    its entries page numbers (0 <= entry < the cache's pages: one synchronisation per tensor version), k_cache
    and v_cache [pages, page_size, heads, head_dim] alike (but v's head_dim), page_size a multiple of block_n (a
    key block never straddles two pages) and each page's rows one after the other (the kernel reads all pages as
    one matrix)."""
    if (not isinstance(block_table, torch.Tensor) or block_table.dtype != torch.int32 or block_table.dim() != 2
            or block_table.shape[0] != batch or block_table.device != k_cache.device):
        raise ValueError(f"block_table must be an int32 tensor [batch ({batch}), pages a sequence] on the cache's "
                         f"device; got {block_table!r:.80}")
    pages, page_size = k_cache.shape[:2]
    if page_size % block_n or v_cache.shape[:3] != k_cache.shape[:3]:
        raise ValueError(f"a paged k_cache / v_cache must be alike (but v's head_dim), [pages, page_size, heads, "
                         f"head_dim] with page_size a multiple of {block_n}; got {tuple(k_cache.shape)}, "
                         f"{tuple(v_cache.shape)}")
    if any(t.stride(0) != page_size * t.stride(1) for t in (k_cache, v_cache)):
        raise ValueError("a paged cache's pages must hold their rows one after the other (stride(0) == "
                         "page_size * stride(1))")
    if not validate or _CHECKED.has((block_table,), (pages,)) or capturing(block_table):
        return
    if block_table.numel():
        low, high = torch.stack([block_table.min(), block_table.max()]).tolist()
        if low < 0 or high >= pages:
            raise ValueError(f"block_table's entries must be pages 0..{pages - 1}; got {low}..{high}")
    _CHECKED.add((block_table,), (pages,))
