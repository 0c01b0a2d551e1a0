"""The masked forward: sliding windows, causal either way round, and ragged packed batches, by skipping tiles.

One program computes BLOCK_M query rows of one (sequence, head). Row r of a sequence of sq queries and
sk keys sits at position r + off, off = sk - sq (flash-attn's bottom-right alignment) or 0 (top-left,
SDPA's is_causal), and sees keys [r + off - left, r + off + right]: window_size=(left, right), causal
is right = 0, "no limit" a bound past the sequence. So every tile of rows has a key range, and in it
three runs of key blocks:
- blocks before the range and after it are never loaded (a window 256 wide reads 3-4 blocks per tile
  however long the sequence);
- blocks that every row of the tile sees whole run unmasked;
- the blocks at the two edges, which some rows see only in part, are masked in registers.
Sequences come from cu_seqlens_q / cu_seqlens_k (flash_attn_varlen_func's): a packed batch, or the
documents of one row (a document mask is a packed batch of documents). Q, K and V are read through TMA
descriptors made on the device over one sequence of one head, so a ragged end is filled with zeros by
the copy engine and never reads into the next sequence. Tensors are [batch, tokens, heads, head_dim]
with any strides but a contiguous last dimension, read in place.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._head_tiles import dot_over_parts, empty_output, head_dim_constexprs, load_part_boxes, part_descriptors
from ._launch import LOG2_E, _ensure_allocator, cdiv
from ._online_softmax import finish, online_softmax_step, scores, with_sink
from ._plans import aligned, run_planned

# (BLOCK_M, BLOCK_N, warps, stages, row blocks per program) on the GPU, and the interpreter's small tiles
# (two row blocks per program, so that the loop over them runs). Chosen on the H200 (docs/kernel.md): the
# row blocks of a program share their descriptors, made on the device at a fixed cost per program that
# short windows feel (window 256, S=2048: 100 us at one row block, 89-90 at two, 83.6 at four); at window
# 1024 and for documents two were measured, four not. A single key loop under Triton's automatic warp
# specialisation was 5% faster at window 256 and wrong on the H200 with Triton 3.6 (errors of 0.95 where
# the interpreter's are 8e-4): dropped.
GPU_CONFIG = (64, 64, 4, 3, 2)
SHORT_WINDOW_CONFIG = (64, 64, 4, 3, 4)  # windows that keep fewer than SHORT_WINDOW keys a row
SHORT_WINDOW = 257
# Q/K tiles 256 wide (head dim 256, 192/128): 32 keys a block and 2 stages, what fits sm_90's shared memory without
# spilling (benchmarks/kernel/plain_kernels_sm90.py new); not measured on a GPU
WIDE_CONFIG = (64, 32, 4, 2, 2)
INTERPRETER_CONFIG = (32, 16, 4, 1, 2)


@triton.jit
def key_range(start_m, sq, sk, off, left, right, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The key blocks the query rows start_m .. start_m + BLOCK_M - 1 see (row r sees keys r + off - left ..
    r + off + right): (lo, full_lo, full_hi, hi). Blocks of BLOCK_N keys from lo up to hi hold every key
    some row sees; those from full_lo to full_hi (none where full_hi <= full_lo) every row sees whole and
    lie inside the sequence; the rest of [lo, hi) is the two edges, masked. lo, full_lo and full_hi are
    block starts; hi is the end of the last key seen."""
    last_row = tl.minimum(start_m + BLOCK_M, sq) - 1
    first = tl.maximum(start_m + off - left, 0)
    hi = tl.minimum(sk, tl.maximum(last_row + off + right + 1, 0))
    hi = tl.where(first < hi, hi, 0)  # no key seen (the first one is past the last): nothing to walk
    lo = first // BLOCK_N * BLOCK_N
    full_lo = tl.cdiv(tl.maximum(last_row + off - left, lo), BLOCK_N) * BLOCK_N
    full_hi = tl.minimum(sk, tl.maximum(start_m + off + right + 1, 0)) // BLOCK_N * BLOCK_N
    return lo, full_lo, full_hi, hi


@triton.jit
def query_range(start_n, sq, sk, off, left, right, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr):
    """The inverse, for the backward's dK/dV pass: the query blocks that see keys start_n .. start_n +
    BLOCK_N - 1, in the same four numbers over blocks of BLOCK_M rows. Key j is seen by rows j - off - right
    .. j - off + left: key_range's rule with queries and keys swapped, the offset negated, left and right
    exchanged."""
    return key_range(start_n, sk, sq, -off, right, left, BLOCK_N, BLOCK_M)


@triton.jit
def _key_run(acc, l_i, m_i, q, q_second, desc_k, desc_k_second, desc_v, lo, hi, first_key, last_key, qk_scale,
             cap_scale, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, SOFTCAP: tl.constexpr, HEAD_DIM: tl.constexpr,
             HEAD_DIM_QK: tl.constexpr):
    """Key blocks [lo, hi) of one tile: row i keeps keys first_key[i]..last_key[i] where MASKED. Q and K in their
    two parts (_head_tiles.py)."""
    for start_n in range(lo, hi, BLOCK_N):
        k, k_second = load_part_boxes(desc_k, desc_k_second, start_n, 0, HEAD_DIM, HEAD_DIM_QK)
        qk = scores(dot_over_parts(q, q_second, k, k_second, HEAD_DIM, HEAD_DIM_QK), qk_scale, cap_scale, SOFTCAP)
        if MASKED:
            keys = start_n + tl.arange(0, BLOCK_N)
            keep = (keys[None, :] >= first_key[:, None]) & (keys[None, :] <= last_key[:, None])
            qk = tl.where(keep, qk, -float("inf"))
        v = desc_v.load([start_n, 0])
        acc, l_i, m_i = online_softmax_step(acc, l_i, m_i, qk, v)
    return acc, l_i, m_i


@triton.jit
def _tile(desc_q, desc_q_second, desc_k, desc_k_second, desc_v, Out, LSE, start_m, sq, sk, q_rows, lse_rows,
          stride_ot, left, right, qk_scale, cap_scale, sink, HEAD_DIM: tl.constexpr, HEAD_DIM_QK: tl.constexpr,
          HEAD_DIM_V: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BOTTOM_RIGHT: tl.constexpr,
          SOFTCAP: tl.constexpr, HAS_SINK: tl.constexpr):
    """Rows start_m .. start_m + BLOCK_M of one sequence of one head; q_rows / lse_rows: its first row's
    output and LSE addresses; sink: the head's sink logit (HAS_SINK)."""
    off = sk - sq if BOTTOM_RIGHT else 0
    rows = start_m + tl.arange(0, BLOCK_M)
    first_key = rows + off - left
    last_key = tl.minimum(rows + off + right, sk - 1)
    lo, full_lo, full_hi, hi = key_range(start_m, sq, sk, off, left, right, BLOCK_M, BLOCK_N)
    q, q_second = load_part_boxes(desc_q, desc_q_second, start_m, 0, HEAD_DIM, HEAD_DIM_QK)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_V], dtype=tl.float32)
    acc, l_i, m_i = _key_run(acc, l_i, m_i, q, q_second, desc_k, desc_k_second, desc_v, lo, tl.minimum(full_lo, hi),
                             first_key, last_key, qk_scale, cap_scale, BLOCK_N, True, SOFTCAP, HEAD_DIM, HEAD_DIM_QK)
    acc, l_i, m_i = _key_run(acc, l_i, m_i, q, q_second, desc_k, desc_k_second, desc_v, full_lo, full_hi, first_key,
                             last_key, qk_scale, cap_scale, BLOCK_N, False, SOFTCAP, HEAD_DIM, HEAD_DIM_QK)
    acc, l_i, m_i = _key_run(acc, l_i, m_i, q, q_second, desc_k, desc_k_second, desc_v, tl.maximum(full_lo, full_hi),
                             hi, first_key, last_key, qk_scale, cap_scale, BLOCK_N, True, SOFTCAP, HEAD_DIM,
                             HEAD_DIM_QK)
    if HAS_SINK:
        acc, l_i, m_i = with_sink(acc, l_i, m_i, sink)
    out, lse = finish(acc, l_i, m_i)
    in_seq = rows < sq
    o_ptrs = q_rows + rows[:, None] * stride_ot + tl.arange(0, HEAD_DIM_V)[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=in_seq[:, None])
    tl.store(lse_rows + rows, lse, mask=in_seq)


@triton.jit
def flash_attn_triton_fwd_masked(
        Q, K, V, Out, LSE, CuQ, CuK, Sink, qk_scale, cap_scale, stride_qb, stride_qt, stride_qh, stride_kb,
        stride_kt, stride_kh, stride_vb, stride_vt, stride_vh, stride_ob, stride_ot, stride_oh, HQ, lse_tokens,
        n_mblocks, left, right,
        GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_QK: tl.constexpr, HEAD_DIM_V: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BOTTOM_RIGHT: tl.constexpr, TILES: tl.constexpr,
        SOFTCAP: tl.constexpr, HAS_SINK: tl.constexpr):
    """Grid (sequences * query heads, row blocks / TILES, batch): each program makes the descriptors of
    one (sequence, head) once and computes TILES row blocks of it, the last row blocks of every head
    first. SOFTCAP: scores soft-capped (_online_softmax.scores); HAS_SINK: Sink[h] (float32, natural log)
    joins each row's softmax denominator. HEAD_DIM: HEAD_DIM_QK rounded up to a power of 2 (192: 256, whose Q
    and K come as boxes of 128 and 64 columns, _head_tiles.py); HEAD_DIM_V: V's and the output's."""
    seq = tl.program_id(0) // HQ
    h = tl.program_id(0) % HQ
    b = tl.program_id(2)
    q_start = tl.load(CuQ + seq)
    sq = tl.load(CuQ + seq + 1) - q_start
    k_start = tl.load(CuK + seq)
    sk = tl.load(CuK + seq + 1) - k_start
    first_block = tl.program_id(1) * TILES
    if tl.maximum(n_mblocks - first_block - TILES, 0) * BLOCK_M < sq:  # its lowest row block is in the sequence
        kv_head = h // GROUP
        desc_q, desc_q_second = part_descriptors(Q + b.to(tl.int64) * stride_qb + q_start * stride_qt + h * stride_qh,
                                                 sq, HEAD_DIM_QK, stride_qt, BLOCK_M, HEAD_DIM, HEAD_DIM_QK)
        desc_k, desc_k_second = part_descriptors(
            K + b.to(tl.int64) * stride_kb + k_start * stride_kt + kv_head * stride_kh, sk, HEAD_DIM_QK, stride_kt,
            BLOCK_N, HEAD_DIM, HEAD_DIM_QK)
        desc_v = tl.make_tensor_descriptor(V + b.to(tl.int64) * stride_vb + k_start * stride_vt + kv_head * stride_vh,
                                           shape=[sk, HEAD_DIM_V], strides=[stride_vt, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM_V])
        q_rows = Out + b.to(tl.int64) * stride_ob + q_start * stride_ot + h * stride_oh
        lse_rows = LSE + (b * HQ + h).to(tl.int64) * lse_tokens + q_start
        sink = 0.0
        if HAS_SINK:
            sink = tl.load(Sink + h)
        for t in tl.range(0, TILES):
            start_m = (n_mblocks - 1 - first_block - t) * BLOCK_M
            if (start_m >= 0) & (start_m < sq):
                _tile(desc_q, desc_q_second, desc_k, desc_k_second, desc_v, Out, LSE, start_m, sq, sk, q_rows,
                      lse_rows, stride_ot, left, right, qk_scale, cap_scale, sink, HEAD_DIM, HEAD_DIM_QK, HEAD_DIM_V,
                      BLOCK_M, BLOCK_N, BOTTOM_RIGHT, SOFTCAP, HAS_SINK)


def score_scales(scale: float, softcap: float) -> dict[str, float]:
    """The kernels' qk_scale and cap_scale (_online_softmax.scores): with softcap > 0 cap * log2(e) and
    scale / cap, else scale * log2(e) and 0 (unused)."""
    if softcap > 0:
        return {"qk_scale": softcap * LOG2_E, "cap_scale": scale / softcap}
    return {"qk_scale": scale * LOG2_E, "cap_scale": 0.0}


def gpu_config(window: tuple[int, int], head_dim_qk: int) -> tuple[int, int, int, int, int]:
    """WIDE_CONFIG for Q/K tiles wider than 128, SHORT_WINDOW_CONFIG for a window that keeps fewer than
    SHORT_WINDOW keys a row, else GPU_CONFIG."""
    if head_dim_qk > 128:
        return WIDE_CONFIG
    return SHORT_WINDOW_CONFIG if window[0] + window[1] + 1 < SHORT_WINDOW else GPU_CONFIG


_PLANS: dict = {}  # per shape, layout and mask on a GPU: the forward's CompiledLaunch (_plans.py)


def masked_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                   cu_seqlens_k: torch.Tensor, max_seqlen_q: int, scale: float, window: tuple[int, int],
                   bottom_right: bool = True, config: tuple[int, int, int, int, int] | None = None,
                   softcap: float = 0.0, sink: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B, Tq, Hq, D], k and v [B, Tk, Hkv, D] holding the sequences cu_seqlens_* mark out of each row's
    tokens (the same sequences in every batch row): (out like q but of v's head dim, natural-log LSE [B, Hq, Tq]
    float32).
    window = (left, right), already finite (causal: right = 0); config overrides GPU_CONFIG and
    SHORT_WINDOW_CONFIG (benchmarks); softcap > 0 soft-caps the scores, sink (float32 [Hq]) adds each head's
    learnable sink to its denominator (_online_softmax). On a GPU launched through a plan per shape
    (_plans.run_planned): the JIT's launch cost tens of microseconds a call, which a short window's host-bound
    step feels."""
    config = config or (gpu_config(window, q.shape[-1]) if q.is_cuda else INTERPRETER_CONFIG)  # CPU: the interpreter
    out = empty_output(q, v)
    lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), device=q.device, dtype=torch.float32)
    sequences = cu_seqlens_q.numel() - 1
    tensors = {"Q": q, "K": k, "V": v, "Out": out, "LSE": lse, "CuQ": cu_seqlens_q, "CuK": cu_seqlens_k,
               "Sink": lse if sink is None else sink}  # without a sink the kernel never reads it
    key = (q.shape, k.shape, q.stride(), k.stride(), v.stride(), q.dtype, q.device, scale, window, bottom_right,
           sequences, max_seqlen_q, config, softcap, sink is None, aligned(q, k, v, out, cu_seqlens_q, cu_seqlens_k))
    run_planned(_PLANS, key, lambda: [_launch(q, k, v, out, scale, window, bottom_right, sequences, max_seqlen_q,
                                              config, softcap, sink is not None)], tensors)
    return out, lse


def _launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, scale: float,
            window: tuple[int, int], bottom_right: bool, sequences: int, max_seqlen_q: int,
            config: tuple[int, int, int, int, int], softcap: float, has_sink: bool) -> tuple:
    """(kernel, grid, its arguments other than tensors by name, launch options) of the masked forward; on a
    GPU it also installs the allocator for the descriptors each program makes (the compiled runner calls
    it on every launch)."""
    if q.is_cuda:
        _ensure_allocator()
    batch, tokens_q, hq, _ = q.shape
    block_m, block_n, warps, stages, tiles = config
    n_mblocks = cdiv(max_seqlen_q, block_m)
    names = [f"stride_{t}{d}" for t in "qkvo" for d in "bth"]
    strides = dict(zip(names, q.stride()[:3] + k.stride()[:3] + v.stride()[:3] + out.stride()[:3], strict=True))
    params = {**score_scales(scale, softcap), **strides, "HQ": hq, "lse_tokens": tokens_q, "n_mblocks": n_mblocks,
              "left": window[0], "right": window[1], "GROUP": hq // k.shape[2], **head_dim_constexprs(q, v),
              "BLOCK_M": block_m, "BLOCK_N": block_n, "BOTTOM_RIGHT": bottom_right, "TILES": tiles,
              "SOFTCAP": softcap > 0, "HAS_SINK": has_sink}
    grid = (sequences * hq, cdiv(n_mblocks, tiles), batch)
    return flash_attn_triton_fwd_masked, grid, params, {"num_warps": warps, "num_stages": stages}
