"""Tiles of a head whose width is not a power of 2 (q/k head dim 192, DeepSeek's MLA prefill): Triton's tiles are,
so the kernels hold such a head in a tile HEAD_DIM wide (the next power of 2) and read its columns past the head's
WIDTH as zeros. Zeros there add nothing to Q K^T, and give dK and dQ zero columns that are never stored. At a width
that is a power of 2 the masks are the plain row masks, so the 64/128/256 paths compile as before. The host side:
which head dims the plain kernels take, and the three constexprs that describe them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

HEAD_DIMS = (64, 128, 256)  # q, k and v of one of these head dims
# (q/k head dim, v head dim) pairs with a narrower v (DeepSeek's MLA prefill): the Q and K tiles are padded to
# the next power of 2, V's and the output's tiles exact
HEAD_DIMS_QK_V = ((192, 128),)


def check_head_dims(head_dim_qk: int, head_dim_v: int) -> None:
    """q/k and v head dims the kernels have tiles for: equal and in HEAD_DIMS, or a pair of HEAD_DIMS_QK_V."""
    if not (head_dim_qk == head_dim_v and head_dim_qk in HEAD_DIMS) and (head_dim_qk, head_dim_v) not in HEAD_DIMS_QK_V:
        pairs = ", ".join(f"{qk} for q and k with {v} for v" for qk, v in HEAD_DIMS_QK_V)
        raise ValueError(f"head_dim must be one of {HEAD_DIMS} for q, k and v alike, or {pairs}; got q/k head_dim "
                         f"{head_dim_qk}, v head_dim {head_dim_v}")


def head_dim_constexprs(q: torch.Tensor, v: torch.Tensor) -> dict[str, int]:
    """The kernels' HEAD_DIM (the Q and K tiles' width: q's head dim rounded up to a power of 2), HEAD_DIM_QK (q's
    and k's head dim) and HEAD_DIM_V (v's)."""
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
def load_every_row(ptrs, HEAD_DIM: tl.constexpr, WIDTH: tl.constexpr):
    """A [rows, HEAD_DIM] tile whose rows all lie in the head: a padded tile's columns past WIDTH read as 0."""
    return tl.load(ptrs, mask=(tl.arange(0, HEAD_DIM) < WIDTH)[None, :], other=0.0) if WIDTH < HEAD_DIM else tl.load(
        ptrs)
