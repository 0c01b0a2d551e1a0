"""The caller's [B, H, S, D] tensor as the 2-D matrix a TMA descriptor copies boxes out of, without a copy.

Both forwards read Q, K and V through 2-D TMA descriptors ([rows, columns], a row stride, contiguous
columns) and write the output at the same places. Row s of (batch b, head h) is matrix row
b * row_b + h * row_h + s, columns h * col_h to h * col_h + D. Two layouts cover what callers pass:
- heads in rows: [B, H, S, D] contiguous, or any view whose batch and head strides are whole rows;
  col_h = 0;
- heads in columns: [B, S, H, D] seen as [B, H, S, D] through a transpose (flash-attn's API,
  transformers' projections), a slice of a packed qkv too: one matrix row holds one token of every
  head, row_h = 0, col_h = the head stride.
A tensor in neither layout, or with a stride or address TMA cannot take (not 16-byte aligned, a
last dimension that is not contiguous), is copied to contiguous first, as every tensor was before.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

TMA_ALIGNMENT = 16  # bytes: the base address and every stride but the last


class MatrixView(NamedTuple):
    rows: int
    cols: int
    stride: int  # elements from one matrix row to the next
    row_b: int
    row_h: int
    col_h: int


def matrix_view(t: torch.Tensor) -> MatrixView | None:
    """Where t's rows lie as a 2-D matrix, or None when t must be copied to contiguous first."""
    batch, heads, seq, dim = t.shape
    stride_b, stride_h, stride_s, stride_d = t.stride()
    stride_b, stride_h = (stride_b if batch > 1 else 0), (stride_h if heads > 1 else 0)  # never stepped over
    elem = t.element_size()
    if ((stride_d != 1 and dim > 1) or stride_s < dim or t.data_ptr() % TMA_ALIGNMENT
            or stride_s * elem % TMA_ALIGNMENT or stride_b % stride_s):
        return None
    if stride_h % stride_s == 0:  # heads in rows
        row_h, col_h, cols = stride_h // stride_s, 0, dim
    elif stride_h * elem % TMA_ALIGNMENT == 0 and stride_h >= dim and (heads - 1) * stride_h + dim <= stride_s:
        row_h, col_h, cols = 0, stride_h, (heads - 1) * stride_h + dim  # heads in columns
    else:
        return None
    row_b = stride_b // stride_s
    return MatrixView((batch - 1) * row_b + (heads - 1) * row_h + seq, cols, stride_s, row_b, row_h, col_h)


def kernel_args(prefix: str, view: MatrixView, names: tuple[str, ...] = MatrixView._fields) -> dict:
    """A view's numbers (those named) as the kernels' arguments of that prefix: q_rows, q_stride, q_row_b..."""
    return {f"{prefix}_{name}": getattr(view, name) for name in names}


def contiguous_copy(t: torch.Tensor) -> torch.Tensor:
    """A fresh contiguous copy (a fresh allocation, so 16-byte aligned even where t is contiguous but not)."""
    return t.clone(memory_format=torch.contiguous_format)


def as_launched(t: torch.Tensor) -> tuple[torch.Tensor, MatrixView]:
    """t itself when a TMA descriptor can read it where it lies, else a contiguous copy; with its view."""
    view = matrix_view(t)
    if view is None:
        t = contiguous_copy(t)
        view = matrix_view(t)
    return t, view


# orders of (batch, heads, seq, head_dim) in memory, outermost first, that matrix_view reads: B H S D, B S H D
# and H B S D (the batch outside the sequence, the head dim last)
READABLE_ORDERS = ([0, 1, 2, 3], [0, 2, 1, 3], [1, 0, 2, 3])


def in_layout_of(g: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """g laid out as empty_in_layout_of(t) is: g itself where it already is, else a copy (for the backwards
    whose kernels write contiguous gradients)."""
    like = empty_in_layout_of(t)
    return g if like.stride() == g.stride() else like.copy_(g)


def empty_in_layout_of(t: torch.Tensor, head_dim: int | None = None) -> torch.Tensor:
    """An empty tensor of t's shape, dense, its first three dimensions in memory in the order of t's
    strides and the last contiguous: a [B, H, S, D] view of [B, S, H, D] gets a [B, S, H, D] output, as
    SDPA's and flash-attn's outputs follow their query's layout (a caller's transpose back is then free).
    An order matrix_view could not read gives a contiguous tensor. It depends on t's shape and strides only
    (not its address, not whether t itself is read in place), so the custom ops' fake implementations
    allocate with it too and agree with the real ones. head_dim: another last dimension than t's (the output
    of a v narrower than q: 192/128)."""
    if head_dim is None or head_dim == t.shape[-1]:  # t's own shape: the two common layouts have quick forms
        if t.is_contiguous():  # before the order, which costs ~1 us of a step's host time per tensor
            return torch.empty_like(t, memory_format=torch.contiguous_format)
        if t.transpose(1, 2).is_contiguous():  # [B, S, H, D] memory, the other common case: empty_like keeps a
            return torch.empty_like(t)  # dense tensor's strides (~3 us against ~9 for the sort and the permute)
    return _empty_in_order(t, t.shape[-1] if head_dim is None else head_dim)


def _empty_in_order(t: torch.Tensor, head_dim: int) -> torch.Tensor:
    """empty_in_layout_of's tensor of t's first three dimensions and a last one of head_dim, from the order of
    t's strides (outermost first; stable for equal strides); contiguous where matrix_view could not read it."""
    order = sorted(range(3), key=lambda d: -t.stride(d)) + [3]
    if order not in READABLE_ORDERS:
        order = [0, 1, 2, 3]
    shape = [*t.shape[:3], head_dim]
    dense = torch.empty([shape[d] for d in order], dtype=t.dtype, device=t.device)
    return dense.permute([order.index(d) for d in range(4)])
