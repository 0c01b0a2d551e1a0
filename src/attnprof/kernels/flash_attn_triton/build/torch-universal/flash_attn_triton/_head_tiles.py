"""Tiles of a head whose width is not a power of 2 (q/k head dim 192, DeepSeek's MLA prefill): Triton's tiles are,
so the kernels hold such a head in a tile HEAD_DIM wide (the next power of 2) and read its columns past the head's
WIDTH as zeros. Zeros there add nothing to Q K^T, and give dK and dQ zero columns that are never stored. At a width
that is a power of 2 the masks are the plain row masks, so the 64/128/256 paths compile as before.
"""

from __future__ import annotations

import triton
import triton.language as tl


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
