"""The inputs a rewrite is run on besides the calls seen: what a factory never makes.

The same shapes with other values (a tensor kept from one call to the next shows there), other sequence
lengths (shorter, one, longer where the module accepts it), a query shorter than the keys (t != s, as
with a KV cache or an offset) where the inputs hold several tensors of one length; and for every
mask-like argument a fully masked row, an empty (all-masked) sample and a padded batch, each in both
polarities (whether True keeps or drops a key is the module's business: either way each is a call it
may get). A finite fill replaces the scores where SDPA's mask only adds to them: they part on a row
with nothing kept, which no factory builds. And each bool argument the other way."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from attnprof.fix.runs import map_leaves
from attnprof.fix.target import tensors_in

CALLS_SEEN = "the calls seen"


def cases(inputs) -> Iterator[tuple[str, Any]]:
    """The calls seen, the same shapes with other values, the inputs at other sequence lengths, and with a
    shorter query."""
    yield CALLS_SEEN, inputs
    length = _sequence_length(inputs)
    if length is None:
        return
    other_values = map_leaves(inputs, lambda t: _reversed(t, length))
    yield "the same shapes with other values (the sequence reversed)", other_values
    for n in sorted({length - 1, max(1, length // 2), 1, length + 3} - {length, 0}, reverse=True):
        yield f"sequence length {n}", _resized(inputs, length, n, every=True)
    if _sharing(inputs, length) > 1:
        for n in sorted({max(1, length // 4), length - 1} - {length, 0}, reverse=True):
            yield f"a query of {n} against {length} keys", _resized(inputs, length, n, every=False)


def masked_cases(inputs) -> Iterator[tuple[str, Any]]:
    """For each mask-like input: a fully masked row, an empty sample and a padded batch, with each of
    the mask's two values as the one that drops."""
    for i, name in enumerate(_names(inputs)):
        t = tensors_in(inputs)[i]
        for fill in _fills(t):
            shown = f"{name} all {_value(fill)}"
            for what, index in _masked_parts(t):
                yield f"{what} ({shown})", _replaced(inputs, i, _filled(t, index, fill))


def flag_cases(inputs) -> Iterator[tuple[str, Any]]:
    """The inputs with each bool argument (`causal=True`, `use_cache=False`) the other way."""
    items = inputs.items() if isinstance(inputs, dict) else enumerate(inputs)
    for key, value in items:
        if isinstance(value, bool):
            flipped = {**inputs, key: not value} if isinstance(inputs, dict) else type(inputs)(
                not v if i == key else v for i, v in enumerate(inputs))
            yield f"{f'`{key}`' if isinstance(inputs, dict) else f'argument {key}'} = {not value}", flipped


def _names(inputs) -> list[str]:
    """A name for each tensor of the inputs: its keyword, or `input i`."""
    if isinstance(inputs, dict):
        return [f"`{k}`" if len(tensors_in(v)) == 1 else f"`{k}` tensor {j}" for k, v in inputs.items()
                for j in range(len(tensors_in(v)))]
    return [f"input {i}" for i in range(len(tensors_in(inputs)))]


def _fills(t) -> list:
    """The values a mask-like tensor holds (each may be the one that drops a key), or [] if not a mask:
    a bool tensor; 0/1 integers or floats; an additive float mask (0 and one large negative value)."""
    import torch

    if not hasattr(t, "dtype") or t.dim() < 1 or t.numel() < 2:
        return []
    if t.dtype == torch.bool:
        return [True, False]
    values = torch.unique(t.detach()).tolist()
    if len(values) > 2 or t.is_complex():
        return []
    if set(values) <= {0, 1} and (not t.is_floating_point() or len(values) == 2):
        return [1, 0]
    low = min(values)
    return [low] if t.is_floating_point() and max(values) == 0 and low <= -1e4 else []


def _value(fill) -> str:
    return str(fill) if isinstance(fill, bool) else f"{fill:g}"


def _masked_parts(t) -> list[tuple[str, tuple]]:
    """(what, index) of a mask's parts to fill: a fully masked row (the first query's, where the mask
    has a query dim), an empty sample (the first along its leading dim), a padded batch (the first
    sample's last half of keys). A 2-d mask is taken as [query, key]: its empty sample is all of it."""
    keys = t.shape[-1]
    parts = []
    if t.dim() >= 2 and t.shape[-2] > 1:
        parts.append(("a fully masked row", (..., 0, slice(None))))
    parts.append(("an empty sample", (0,) if t.dim() >= 3 and t.shape[0] > 1 else (...,)))
    if keys > 1:
        parts.append(("a padded batch", ((0,) if t.dim() >= 2 else ()) + (..., slice(keys // 2, None))))
    return parts


def _filled(t, index: tuple, fill):
    t = t.detach().clone()
    t[index] = fill
    return t


def _replaced(inputs, position: int, new):
    """The inputs with their `position`-th tensor replaced by `new`."""
    seen = {"n": -1}

    def one(t):
        if not (hasattr(t, "dtype") and hasattr(t, "shape")):
            return t
        seen["n"] += 1
        return new if seen["n"] == position else t

    return map_leaves(inputs, one)


def _sequence_dim(t) -> int | None:
    """Where a tensor's sequence runs: the second-last dim of a float tensor, the last of token ids."""
    if not hasattr(t, "shape") or t.dim() < 1:
        return None
    if t.is_floating_point():
        return t.dim() - 2 if t.dim() >= 2 else None
    return t.dim() - 1 if t.dim() == 2 and t.dtype.is_signed else None  # int64 token ids, not bool or uint8


def _sequence_length(inputs) -> int | None:
    """The most common sequence length among the inputs' tensors."""
    lengths = [t.shape[d] for t in tensors_in(inputs) if (d := _sequence_dim(t)) is not None]
    return max(set(lengths), key=lengths.count) if lengths else None


def _sharing(inputs, length: int) -> int:
    return sum(1 for t in tensors_in(inputs) if t.is_floating_point() and (d := _sequence_dim(t)) is not None
               and t.shape[d] == length)


def _resized(inputs, old: int, new: int, every: bool):
    """The inputs with their sequence dims of `old` cut (or grown by repeating) to `new`; with `every`
    False only the first float tensor of that length (the query), and the query dim of square masks (not of a
    key or value shaped as the query is: with a head dim equal to the length, k looks square too)."""
    state: dict[str, Any] = {"query": None}

    def one(t):
        if not hasattr(t, "shape"):
            return t
        if every:
            dims = [d for d in range(max(t.dim() - 2, 0), t.dim()) if t.shape[d] == old]
        elif t.is_floating_point() and _sequence_dim(t) is not None and t.shape[-2] == old and not state["query"]:
            state["query"] = tuple(t.shape)
            dims = [t.dim() - 2]
        elif t.dim() >= 2 and tuple(t.shape[-2:]) == (old, old) and tuple(t.shape) != state["query"]:
            dims = [t.dim() - 2]  # a passed [.., t, s] mask: its query dim (a key of the query's shape is no mask)
        else:
            dims = []
        for d in dims:
            t = _cut_or_grow(t, d, new)
        return t

    return map_leaves(inputs, one)


def _reversed(t, length: int):
    """`t` reversed along its sequence dims (of its last two, those of `length`): same shapes, other values,
    and a mask keeps its count of kept keys per row."""
    if not hasattr(t, "flip"):
        return t
    dims = [d for d in range(max(t.dim() - 2, 0), t.dim()) if t.shape[d] == length]
    return t.flip(dims) if dims else t


def _cut_or_grow(t, dim: int, n: int):
    import torch

    if n <= t.shape[dim]:
        return t.narrow(dim, 0, n).contiguous()
    reps = -(-n // t.shape[dim])
    return torch.cat([t] * reps, dim=dim).narrow(dim, 0, n).contiguous()
