"""Tiles of a head whose width is not a power of 2 (q/k head dim 192, DeepSeek's MLA prefill): Triton's tiles are,
so the kernels hold such a head as two parts, HEAD_DIM // 2 columns (HEAD_DIM: the width rounded up to a power of 2)
and the rest: 192 as 128 + 64. A product over the head's columns is the sum of the two parts' products, and a
product into them (dK, dQ) is two accumulators. Padding the head to one 256-wide tile instead puts zeros through
the tensor cores and, on the forward's K, through registers on every key block (docs/kernel.md). At a width that
is a power of 2 the second part is the first (never loaded, stored or multiplied twice) and the masks are the plain
row masks, so the 64/128/256 paths compile as before. The host side: which head dims the plain kernels take, and the
three constexprs that describe them. The decode keeps one padded tile (its TMA box over the head's own shape: the
copy engine fills the columns past the head with zeros; tile_mask for its pointer loads): it is bound by memory.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

HEAD_DIMS = (64, 128, 256)  # q, k and v of one of these head dims
# (q/k head dim, v head dim) pairs with a narrower v (DeepSeek's MLA prefill): Q and K in two parts (or, in the
# decode, a padded tile), V's and the output's tiles exact
HEAD_DIMS_QK_V = ((192, 128),)


def check_head_dims(head_dim_qk: int, head_dim_v: int) -> None:
    """q/k and v head dims the kernels have tiles for: equal and in HEAD_DIMS, or a pair of HEAD_DIMS_QK_V."""
    if not (head_dim_qk == head_dim_v and head_dim_qk in HEAD_DIMS) and (head_dim_qk, head_dim_v) not in HEAD_DIMS_QK_V:
        pairs = ", ".join(f"{qk} for q and k with {v} for v" for qk, v in HEAD_DIMS_QK_V)
        raise ValueError(f"head_dim must be one of {HEAD_DIMS} for q, k and v alike, or {pairs}; got q/k head_dim "
                         f"{head_dim_qk}, v head_dim {head_dim_v}")


def head_dim_constexprs(q: torch.Tensor, v: torch.Tensor) -> dict[str, int]:
    """The kernels' HEAD_DIM (q's head dim rounded up to a power of 2: twice the first part's width, the padded
    tile's in the decode), HEAD_DIM_QK (q's and k's head dim) and HEAD_DIM_V (v's)."""
    return {"HEAD_DIM": 1 << (q.shape[-1] - 1).bit_length(), "HEAD_DIM_QK": q.shape[-1], "HEAD_DIM_V": v.shape[-1]}


def empty_output(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The output of q against v: like q (its layout kept), of v's head dim (192/128: a dense new tensor)."""
    return torch.empty_like(q) if v.shape[-1] == q.shape[-1] else q.new_empty((*q.shape[:-1], v.shape[-1]))


@triton.jit
def tile_mask(rows_ok, HEAD_DIM: tl.constexpr, WIDTH: tl.constexpr):
    """The mask of a [rows, HEAD_DIM] tile of a head WIDTH columns wide: the rows rows_ok keeps and, in a padded
    tile (WIDTH < HEAD_DIM), the head's columns only."""
    # a constexpr test: Triton compiles only the branch taken
    return rows_ok[:, None] & (tl.arange(0, HEAD_DIM) < WIDTH)[None, :] if WIDTH < HEAD_DIM else rows_ok[:, None]


@triton.jit
def part_descriptors(T, rows, cols, stride, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr, WIDTH: tl.constexpr):
    """TMA descriptors over T as a [rows, cols] matrix, copying [BLOCK, part] boxes of a head's two parts (one box
    HEAD_DIM wide, twice, at a power-of-2 WIDTH): read with load_part_boxes."""
    if WIDTH < HEAD_DIM:
        first = tl.make_tensor_descriptor(T, shape=[rows, cols], strides=[stride, 1],
                                          block_shape=[BLOCK, HEAD_DIM // 2])
        second = tl.make_tensor_descriptor(T, shape=[rows, cols], strides=[stride, 1],
                                           block_shape=[BLOCK, WIDTH - HEAD_DIM // 2])
    else:
        first = tl.make_tensor_descriptor(T, shape=[rows, cols], strides=[stride, 1], block_shape=[BLOCK, HEAD_DIM])
        second = first
    return first, second


@triton.jit
def load_part_boxes(first, second, row, col, HEAD_DIM: tl.constexpr, WIDTH: tl.constexpr):
    """The two parts of BLOCK rows from row of the head whose column 0 is col (part_descriptors' boxes)."""
    a = first.load([row, col])
    b = second.load([row, col + HEAD_DIM // 2]) if WIDTH < HEAD_DIM else a
    return a, b


@triton.jit
def part_offsets(start, offs, stride, HEAD_DIM: tl.constexpr, WIDTH: tl.constexpr):
    """Offsets of rows offs of a head WIDTH columns wide that starts at start: (first part, second part), the parts
    [rows, HEAD_DIM // 2] and [rows, WIDTH - HEAD_DIM // 2], or at a power-of-2 WIDTH the whole head twice."""
    rows = start + offs[:, None] * stride
    if WIDTH < HEAD_DIM:
        first = rows + tl.arange(0, HEAD_DIM // 2)[None, :]
        second = rows + (HEAD_DIM // 2 + tl.arange(0, WIDTH - HEAD_DIM // 2))[None, :]
    else:
        first = rows + tl.arange(0, HEAD_DIM)[None, :]
        second = first
    return first, second


@triton.jit
def load_parts(base, first, second, rows_ok, HEAD_DIM: tl.constexpr, WIDTH: tl.constexpr,
               EVERY_ROW: tl.constexpr):
    """The two parts of a head's tile (part_offsets): rows outside rows_ok read as 0; with EVERY_ROW every row is in
    the head, no mask (rows_ok: None)."""
    if EVERY_ROW:
        a = tl.load(base + first)
        b = tl.load(base + second) if WIDTH < HEAD_DIM else a
    else:
        a = tl.load(base + first, mask=rows_ok[:, None], other=0.0)
        b = tl.load(base + second, mask=rows_ok[:, None], other=0.0) if WIDTH < HEAD_DIM else a
    return a, b


@triton.jit
def store_parts(base, first, second, a, b, scale, rows_ok, HEAD_DIM: tl.constexpr, WIDTH: tl.constexpr):
    """Store a head's two float32 parts times scale, in base's dtype, on the rows rows_ok keeps."""
    tl.store(base + first, (a * scale).to(base.dtype.element_ty), mask=rows_ok[:, None])
    if WIDTH < HEAD_DIM:
        tl.store(base + second, (b * scale).to(base.dtype.element_ty), mask=rows_ok[:, None])


@triton.jit
def zero_parts(ROWS: tl.constexpr, HEAD_DIM: tl.constexpr, WIDTH: tl.constexpr):
    """Two float32 accumulators for a head's parts (one, twice, at a power-of-2 WIDTH)."""
    if WIDTH < HEAD_DIM:
        a = tl.zeros([ROWS, HEAD_DIM // 2], dtype=tl.float32)
        b = tl.zeros([ROWS, WIDTH - HEAD_DIM // 2], dtype=tl.float32)
    else:
        a = tl.zeros([ROWS, HEAD_DIM], dtype=tl.float32)
        b = a
    return a, b


@triton.jit
def dot_over_parts(x, x_second, y, y_second, HEAD_DIM: tl.constexpr, WIDTH: tl.constexpr):
    """x y^T summed over the head's columns, x and y each given as its two parts."""
    if WIDTH < HEAD_DIM:
        product = tl.dot(x_second, tl.trans(y_second), tl.dot(x, tl.trans(y)))
    else:
        product = tl.dot(x, tl.trans(y))
    return product


@triton.jit
def dot_into_parts(acc, acc_second, x, y, y_second, HEAD_DIM: tl.constexpr, WIDTH: tl.constexpr):
    """acc + x y over each of y's two parts (x: [rows, keys] in y's dtype)."""
    acc += tl.dot(x, y)
    if WIDTH < HEAD_DIM:
        acc_second += tl.dot(x, y_second)
    return acc, acc_second
