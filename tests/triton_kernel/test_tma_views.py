"""_tma_views: where each row of a [B, H, S, D] tensor lies in the matrix a TMA descriptor reads (no GPU)."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

from attnprof.kernels import import_from_folder  # noqa: E402


@pytest.fixture(scope="module")
def views():
    return sys.modules[import_from_folder().__name__ + "._tma_views"]


def _layouts() -> dict:
    packed = torch.empty(2, 40, 3, 4, 64, dtype=torch.float16)  # [B, S, 3, H, D]
    return {
        "bhsd": torch.empty(2, 3, 40, 64, dtype=torch.float16),
        "bshd": torch.empty(2, 40, 3, 64, dtype=torch.float16).transpose(1, 2),
        "packed_k": packed[:, :, 1].transpose(1, 2),
        "heads_sliced": torch.empty(2, 5, 40, 64, dtype=torch.float16)[:, 1:4],
        "one_batch_one_head": torch.empty(1, 40, 1, 128, dtype=torch.bfloat16).transpose(1, 2),
    }


@pytest.mark.parametrize("name", list(_layouts()))
def test_every_row_of_every_head_is_at_the_matrix_place_its_view_gives(views, name):
    t = _layouts()[name]
    view = views.matrix_view(t)
    assert view is not None
    base, elem = t.data_ptr(), t.element_size()
    batch, heads, seq, dim = t.shape
    for b in range(batch):
        for h in range(heads):
            for s in (0, seq - 1):
                row, col = b * view.row_b + h * view.row_h + s, h * view.col_h
                assert row < view.rows and col + dim <= view.cols <= view.stride
                assert base + (row * view.stride + col) * elem == t[b, h, s].data_ptr(), (b, h, s)


def test_a_tensor_tma_cannot_read_is_copied_and_outputs_follow_the_querys_layout(views):
    q = torch.empty(2, 3, 40, 64, dtype=torch.float16)
    assert views.matrix_view(q.transpose(-1, -2).contiguous().transpose(-1, -2)) is None  # D not contiguous
    unaligned = torch.empty(q.numel() + 1, dtype=q.dtype)[1:].view_as(q)
    assert views.matrix_view(unaligned) is None
    copy, view = views.as_launched(unaligned)
    assert copy.is_contiguous() and copy.data_ptr() % 16 == 0 and view.rows == 2 * 3 * 40
    assert views.as_launched(q)[0] is q
    bshd = q.transpose(1, 2).contiguous().transpose(1, 2)
    assert views.empty_in_layout_of(bshd).stride() == bshd.stride()
    assert views.empty_in_layout_of(bshd[:, :, :, :]).transpose(1, 2).is_contiguous()
    assert views.empty_in_layout_of(q).is_contiguous()


def test_outputs_keep_every_readable_order_of_their_input_and_are_contiguous_otherwise(views):
    """empty_in_layout_of depends on the strides only, so the fake ops (which have no address) agree with it;
    the batch inside the sequence ([S, B, H, D] memory) is no order matrix_view reads: contiguous then."""
    for name, t in _layouts().items():
        out = views.empty_in_layout_of(t)
        assert views.matrix_view(out) is not None, name
        assert sorted(range(4), key=lambda d: -out.stride(d)) == sorted(range(4), key=lambda d: -t.stride(d)) or (
            t.shape[0] == 1), name
    seq_outer = torch.empty(40, 2, 3, 64, dtype=torch.float16).permute(1, 2, 0, 3)  # [B, H, S, D] view of [S, B, H, D]
    assert views.empty_in_layout_of(seq_outer).is_contiguous()
    unaligned = torch.empty(2 * 40 * 3 * 64 + 1, dtype=torch.float16)[1:].view(2, 40, 3, 64).transpose(1, 2)
    assert views.matrix_view(unaligned) is None  # read through a copy, yet its output keeps [B, S, H, D]
    assert views.empty_in_layout_of(unaligned).transpose(1, 2).is_contiguous()
