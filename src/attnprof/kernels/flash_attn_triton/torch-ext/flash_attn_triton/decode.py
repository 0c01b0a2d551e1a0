"""Split-KV decode (flash-decoding): a few new queries (1-16) against a long KV cache.

A decode call reads the whole cache to produce a handful of rows, so it is bound by memory, not by
the tensor cores, and one program per (batch, KV head) would leave most SMs idle. So:
- the query heads of one GQA group and the new queries are packed into the M dimension of one tile
  (row = head_in_group * Sq + query): every K/V block is read once for the whole group;
- the key range of each sequence is split across `splits` programs (from the cache length and the
  SM count, num_splits()); each writes a partial output and its LSE in float32, and a second kernel
  (flash_attn_triton_decode_combine) weighs the partials by exp(lse_s - lse) and sums them; for tiles
  of CardSettings.fused_min_rows rows or more (the H200's 64), the last of a tile's splits does that itself;
- cache_seqlens gives each sequence its own length: a split covers a share of that sequence's keys,
  so a short sequence's programs do little and read nothing past its end;
- the queries sit at the end of their sequence (query i at cache_seqlens - Sq + i, flash-attn's
  bottom-right alignment); causal and the window (left, right) bound each row's keys, masked in
  registers on every block (the kernel is memory-bound: the mask costs no time that shows).
Tensors are [batch, seq, heads, head_dim] with any strides but a contiguous last dimension, so both
flash-attn's layout and a transposed [B, H, S, D] one are read in place.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from . import _cards
from ._decode_combine import GDC_AVAILABLE, flash_attn_triton_decode_combine
from ._decode_split import flash_attn_triton_decode_split
from ._head_tiles import empty_output, head_dim_constexprs
from ._launch import (
    INTERPRETER_PROGRAMS,
    _ensure_allocator,
    cdiv,
    check_inputs,
    interpreting,
    next_power_of_2,
)
from ._plans import aligned, run_planned
from .forward._hopper_launch import sm_count
from .masks import score_scales

# programs one split-KV launch aims for, per SM. Measured on the H200 (B8, 8 KV heads, 8k and 32k caches,
# benchmarks/kernel/triton_decode.py --sweep): 2-4 splits (128-256 programs) 67-68 us at 8k, 8-32 splits
# 72-109 us: more programs than two per SM only add partials to combine
PROGRAMS_PER_SM = 2
MAX_SPLITS = 64
# rows of one tile; more (a large group times many queries) take several tiles. ptxas (sm_90, Triton 3.6)
# spills registers at 128 rows, and needs 8 warps above 32 rows (200 registers, no spill, at 64)
MAX_ROWS = 64


class DecodeConfig(NamedTuple):
    """The split kernel's keys a block, pipeline stages, and whether K and V come through TMA descriptors
    (else masked pointer loads)."""
    block_n: int
    stages: int
    tma: bool = True


class CardSettings(NamedTuple):
    """The decode's settings on one card: its tile, the fewest keys a split gets (a shorter split costs more
    in partials than it saves) and, where shorter splits give every SM one program, the fewest keys those may get
    (fill_split_keys, 0: none shorter), the most keys a split and rows a tile may have to read K and V by pointer
    loads rather than through TMA descriptors (0: always TMA), the fewest rows a tile needs for its last
    split to combine the partials itself (FUSED_NEVER: a combine kernel always), and the most rows a tile may have
    for its combine kernel to be launched as the split kernel's programmatic dependent (PDL, _decode_combine.py;
    0: never)."""
    config: DecodeConfig
    min_split_keys: int
    pointer_max_keys: int
    pointer_max_rows: int
    fused_min_rows: int
    pdl_max_rows: int = 0
    fill_split_keys: int = 0


# tiles of at least this many rows have their last split combine the partials (one launch) instead of a combine
# kernel after the split kernel, on the H200 (CardSettings.fused_min_rows). H200, B8 32/8 heads, alternating rounds
# of graph replays (docs/kernel.md): at q-len 16 (64 rows) the fused form took 0.956x the two kernels' time at 8k
# and 0.980x at 32k; at q-len 1 (16 rows) 1.024x at 8k and 1.064x at 2k (every program's acq_rel count and the last
# one's combine lengthen the tail more than a second launch costs inside a graph); q-len 4 equal
FUSED_MIN_ROWS = 64


# By card (_cards.py), each measured there (docs/kernel.md, "Second H100 run"):
# - H200: the B8 sweeps (benchmarks/kernel/triton_decode.py --sweep) and the b1 sweep of 2026-12-06, TMA
#   reads; pointer loads not yet measured there.
# - H100: the b1 sweep and its alternating rounds (kernel_card_check.sh b1 versus, 2026-12-07). Pointer
#   loads at 16 splits took 6.84 us at 2k keys against the default's 9.23 (TMA, 8 splits of 256; cuDNN
#   7.69), 8.64 against 9.99 at 4k (cuDNN 9.74); the likely cause, the descriptor each program writes and
#   fences, is latency that a program reading a few blocks does not hide. By keys a split (64 keys a block,
#   3 stages): pointer loads 6-22% faster at 128-512, equal at 1024, 2-8% slower at 2048. At B8
#   (triton_decode.py, alternating rounds) they were 2-3% faster with 16-row tiles and 9-18% slower with
#   64-row ones (q-len 16), so they are kept to 16-row tiles (a GQA group of 4 at q-len 1 to 4, or of 16 at
#   q-len 1).
# - PDL (the combine kernel placed while the split kernel runs, waiting for its partials): on the H100 (session 22,
#   kernel_card_check.sh tests wide versus decode, then b1 versus; alternating rounds of graph replays) it took
#   0.954 / 0.925 / 0.941x the time at batch 1 and 2k / 4k / 8k keys from DRAM, and at B8 with 16-row tiles 0.978x
#   (q-len 1, 2k), 0.992x (8k), 0.999x (32k, 128k equal) and 0.991x (q-len 4, 8k); with 64-row tiles (q-len 16)
#   0.986x at 8k but 1.033x at 32k (1.008-1.052), so there it stays off. The H200: not yet timed, off. Timed with
#   each split program triggering the combine as it started; since then it triggers once its keys are read
#   (_decode_split.py says why). Session 23, two calls on H100s (not one's rounds): with it batch 1 took 8.31 /
#   10.89 / 17.53 us from DRAM at 2k / 4k / 8k, without it 9.02 / 11.61 / 18.17, cuDNN 9.97 / 13.37 / 18.92 and
#   9.84 / 13.17 / 18.72 (benchmarks time ours_pdl and ours_no_pdl in the same rounds since).
# - Split length on the H100: the b1 sweeps of sessions 20 and 22 (and their alternating rounds: the pick at 4k took
#   0.90x the time of 32 splits of 128 keys both times) found 2k fastest at 16 splits of 128 keys, 4k at 16 of
#   256, 8k at 32-64 of 128-256. One rule fits all three: 256 keys a split (min_split_keys), shorter, down to 128
#   (fill_split_keys), only as far as one program per SM (16 splits of 8 KV heads). B2 at 2k (8 splits of 256 keys,
#   128 programs, what B1 at 4k runs) was not timed.
# - The fused combine (FUSED_MIN_ROWS above): on the H200 it won at 64 rows; on the H100 (kernel_card_check.sh
#   decode, 2026-12-07, with its loads batched since) the two kernels took 0.960x its time at q-len 16 and 8k keys
#   (0.940-0.983) and 0.926x at 32k (0.916-0.938), so the H100 always launches the combine kernel.
FUSED_NEVER = 2 * MAX_ROWS  # more rows than a tile has
BY_CARD = {_cards.H200: CardSettings(DecodeConfig(64, 3), 256, 0, 0, FUSED_MIN_ROWS),
           _cards.H100: CardSettings(DecodeConfig(64, 3), 256, 1024, 16, FUSED_NEVER, 16, 128)}
GPU_CONFIG = BY_CARD[_cards.H200].config  # what every card's decode shares: 64 keys a block (a page's unit)
# the interpreter's small tile, TMA reads, the fused combine where the H200 has it (so CPU tests run both combines)
INTERPRETER_SETTINGS = CardSettings(DecodeConfig(16, 1), 256, 0, 0, FUSED_MIN_ROWS)


def card_settings(device: torch.device) -> CardSettings:
    """BY_CARD's row for this CUDA device (the card it is: _cards.device_card); the interpreter's tile elsewhere."""
    if interpreting() or device.type != "cuda":
        return INTERPRETER_SETTINGS
    return BY_CARD[_cards.device_card(device.index if device.index is not None else 0, tuple(BY_CARD))]


def num_splits(units: int, max_keys: int, programs: int, min_split_keys: int, fill_split_keys: int = 0) -> int:
    """Splits per sequence: enough programs for every SM (programs in all, PROGRAMS_PER_SM an SM), no split under
    min_split_keys keys unless splits of fill_split_keys or more give each SM one program, at most MAX_SPLITS.
    `units` is batch x KV heads x row blocks."""
    by_programs = round(programs / units)
    by_length = cdiv(max_keys, min_split_keys)
    if fill_split_keys:
        by_length = max(by_length, min(programs // PROGRAMS_PER_SM // units, cdiv(max_keys, fill_split_keys)))
    return max(1, min(by_programs, by_length, MAX_SPLITS))


def check_decode_inputs(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    """_launch.check_inputs' rules (heads, head dims, dtypes) on the [B, S, H, D] layout."""
    if q.dim() != 4 or k_cache.dim() != 4 or v_cache.dim() != 4:
        raise ValueError(f"q, k_cache, v_cache must be [batch, seq, heads, head_dim]; got {tuple(q.shape)}, "
                         f"{tuple(k_cache.shape)}, {tuple(v_cache.shape)}")
    check_inputs(*(t.transpose(1, 2) for t in (q, k_cache, v_cache)))
    if any(t.stride(-1) != 1 for t in (q, k_cache, v_cache)):
        raise ValueError("q, k_cache and v_cache need a contiguous last (head_dim) dimension")


class Tiles(NamedTuple):
    """How one decode shape is cut: rows per tile, row blocks per (batch, KV head), keys per block, pipeline
    stages, warps, key splits per sequence, and how K and V are read (DecodeConfig.tma)."""
    block_m: int
    n_mblocks: int
    block_n: int
    stages: int
    warps: int
    splits: int
    fused: bool  # the combine in the split kernel's last program (CardSettings.fused_min_rows), more than 1 split
    tma: bool
    pdl: bool = False  # the combine kernel launched as the split kernel's programmatic dependent


def tiles_for(q_shape: tuple, cache_shape: tuple, splits: int | None, config: tuple | None,
              fused: bool | None, device: torch.device, pdl: bool | None = None) -> Tiles:
    """The tiles of q [B, Sq, Hq, D] against a cache [B, S, Hkv, D]; splits, config, fused, pdl as decode() takes
    them."""
    interpreted = interpreting()
    batch, sq, hq, _ = q_shape
    hkv = cache_shape[2]
    group = hq // hkv
    block_m = max(16, min(MAX_ROWS, next_power_of_2(group * sq)))  # tl.dot takes 16 rows or more
    n_mblocks = cdiv(group * sq, block_m)
    card = card_settings(device)
    if not splits:
        programs = INTERPRETER_PROGRAMS if interpreted else sm_count(device.index) * PROGRAMS_PER_SM
        splits = num_splits(batch * hkv * n_mblocks, cache_shape[1], programs, card.min_split_keys,
                            card.fill_split_keys)
    by_pointers = cdiv(cache_shape[1], splits) <= card.pointer_max_keys and block_m <= card.pointer_max_rows
    block_n, stages, tma = DecodeConfig(*config) if config else card.config._replace(tma=not by_pointers)
    fused = (block_m >= card.fused_min_rows if fused is None else fused) and splits > 1
    pdl = block_m <= card.pdl_max_rows if pdl is None else pdl
    # grid dependency control is sm_90's and newer, and not the interpreter's; with a combine kernel to launch only
    pdl = pdl and splits > 1 and not fused and GDC_AVAILABLE and not interpreted and (
        device.type == "cuda" and torch.cuda.get_device_capability(device) >= (9, 0))
    return Tiles(block_m, n_mblocks, block_n, stages, 4 if block_m <= 32 else 8, splits, fused, tma, pdl)


def launches(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor, scale: float,
             window: tuple[int, int], tiles: Tiles, softcap: float = 0.0, has_sink: bool = False,
             block_table: torch.Tensor | None = None) -> list[tuple]:
    """(kernel, grid, its arguments other than tensors by name, options) of the split kernel and, with more
    than one split, the combine; block_table: a paged cache's ([pages, page_size, Hkv, D])."""
    if q.is_cuda and tiles.tma:
        _ensure_allocator()  # the K/V descriptors are made on the device (the runner allocates per launch)
    batch, sq, hq, _ = q.shape
    hkv = k_cache.shape[2]
    names = [f"stride_{t}{d}" for t in "qkvo" for d in "bsh"]
    strides = q.stride()[:3] + k_cache.stride()[:3] + v_cache.stride()[:3] + out.stride()[:3]
    split = (flash_attn_triton_decode_split, (tiles.splits, batch * hkv * tiles.n_mblocks),
             {**score_scales(scale, softcap), **dict(zip(names, strides, strict=True)), "SQ": sq, "HKV": hkv,
              "n_mblocks": tiles.n_mblocks, "left": window[0], "right": window[1], "splits": tiles.splits,
              "GROUP": hq // hkv, **head_dim_constexprs(q, v_cache),
              "BLOCK_M": tiles.block_m, "BLOCK_N": tiles.block_n,
              "PARTIAL": tiles.splits > 1, "FUSED": tiles.fused, "SOFTCAP": softcap > 0, "HAS_SINK": has_sink,
              "TMA": tiles.tma, "PDL": tiles.pdl, **combine_loads(tiles, v_cache.shape[-1]),
              **paging(k_cache, block_table)},
             {"num_warps": tiles.warps, "num_stages": tiles.stages})
    if tiles.splits == 1 or tiles.fused:
        return [split]
    combine = (flash_attn_triton_decode_combine, (batch * hq * sq,),
               {"stride_ob": strides[9], "stride_os": strides[10], "stride_oh": strides[11], "HQ": hq, "SQ": sq,
                "splits": tiles.splits, "HEAD_DIM": v_cache.shape[-1], "SPLITS_P2": next_power_of_2(tiles.splits),
                "HAS_SINK": has_sink, "PDL": tiles.pdl},
               {"num_warps": 4, **({"launch_pdl": True} if tiles.pdl else {})})
    return [split, combine]


# the most float32 elements one load of the fused combine reads: [16 rows, 4 splits, 128] is 64 registers a thread
# at 4 warps, beside the tile's accumulator
COMBINE_LOAD_ELEMENTS = 8192


def combine_loads(tiles: Tiles, head_dim_v: int) -> dict:
    """The fused combine's load widths (_decode_combine._combine_tile): every split's LSE at once, the partial
    outputs SPLITS_CHUNK splits a load; 1 and 1 without the fused combine (one compiled kernel, any split count)."""
    if not tiles.fused:
        return {"SPLITS_P2": 1, "SPLITS_CHUNK": 1}
    splits_p2 = next_power_of_2(tiles.splits)
    chunk = max(1, COMBINE_LOAD_ELEMENTS // (tiles.block_m * head_dim_v))
    return {"SPLITS_P2": splits_p2, "SPLITS_CHUNK": min(splits_p2, chunk)}


def paging(k_cache: torch.Tensor, block_table: torch.Tensor | None) -> dict:
    """The split kernel's paging arguments: the table's row stride, the page size and every page's rows."""
    if block_table is None:
        return {"stride_bt": 0, "page_size": 1, "paged_rows": 0, "PAGED": False}
    return {"stride_bt": block_table.stride(0), "page_size": k_cache.shape[1],
            "paged_rows": k_cache.shape[0] * k_cache.shape[1], "PAGED": True}


_COUNTS: dict = {}  # (device, stream): the tile counters of the fused combine on that stream


def tile_counts(units: int, device: torch.device) -> torch.Tensor:
    """Zeroed int32 counters, one per tile, for the fused combine. The tile's last program sets its counter
    back to zero, so one buffer per stream stays zeroed from call to call (calls on one stream never
    overlap); under CUDA graph capture each call gets a fresh zeroed one (a replay may run beside other work
    on its stream, as _launch's descriptor scratch); on CPU (the interpreter) a fresh one per call."""
    if device.type != "cuda" or torch.cuda.is_current_stream_capturing():
        return torch.zeros(units, dtype=torch.int32, device=device)
    key = (device, torch._C._cuda_getCurrentRawStream(device.index))
    counts = _COUNTS.get(key)
    if counts is None or counts.numel() < units:
        counts = _COUNTS[key] = torch.zeros(units, dtype=torch.int32, device=device)
    return counts


_TILES: dict = {}  # per shape, layout, dtype, mask and overrides, once its inputs passed the checks: its Tiles
_PLANS: dict = {}  # the same, with the pointers' alignment, on a GPU: the launches' CompiledLaunch (_plans.py)


def decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor,
           scale: float, window: tuple[int, int], splits: int | None = None,
           config: tuple | None = None, fused: bool | None = None, softcap: float = 0.0,
           sink: torch.Tensor | None = None, block_table: torch.Tensor | None = None, pdl: bool | None = None
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of q [B, Sq, Hq, D] over the first cache_seqlens[b] keys of k_cache/v_cache [B, S, Hkv, D]:
    (out [B, Sq, Hq, D], natural-log LSE [B, Hq, Sq] float32). window = (left, right) keys each row may
    see before and after its own position, already finite (causal: right = 0). splits and config
    (DecodeConfig's fields) override num_splits() and GPU_CONFIG, fused and pdl the card's fused_min_rows and
    pdl_max_rows (benchmarks). On a
    GPU the launches go through a plan per shape (_plans.run_planned): a call allocates its outputs and runs
    one or two compiled kernels, where the JIT's launches cost tens of microseconds each. softcap and sink (float32
    [Hq]): masks.masked_forward's. block_table [B, pages a sequence] (int32): k_cache / v_cache are pages
    [pages, page_size, Hkv, D] (page_size a multiple of GPU_CONFIG's BLOCK_N, pages contiguous; flash_api checks)."""
    key = (q.shape, k_cache.shape, v_cache.shape, q.stride(), k_cache.stride(), v_cache.stride(), q.dtype,
           k_cache.dtype, v_cache.dtype, q.device, scale, window, splits, config, fused, pdl, softcap, sink is None,
           None if block_table is None else (block_table.shape, block_table.stride()))
    tiles = _TILES.get(key)
    if tiles is None:  # the checks read only what the key holds: once per key
        caches = (k_cache, v_cache) if block_table is None else (  # one sequence's view, for the checks
            t[:1].expand(q.shape[0], *t.shape[1:]) for t in (k_cache, v_cache))
        check_decode_inputs(q, *caches)
        longest = k_cache.shape[1] if block_table is None else block_table.shape[1] * k_cache.shape[1]
        tiles = _TILES[key] = tiles_for(q.shape, (q.shape[0], longest, *k_cache.shape[2:]), splits, config, fused,
                                        q.device, pdl)
    batch, sq, hq, _ = q.shape
    out = empty_output(q, v_cache)
    lse = torch.empty((batch, hq, sq), device=q.device, dtype=torch.float32)
    parts = (batch * hq * sq * tiles.splits) if tiles.splits > 1 else 0
    part_o = torch.empty((parts, v_cache.shape[-1]), device=q.device, dtype=torch.float32)
    part_lse = torch.empty((parts,), device=q.device, dtype=torch.float32)
    counts = tile_counts(batch * k_cache.shape[2] * tiles.n_mblocks, q.device) if tiles.fused else part_lse
    tensors = {"Q": q, "K": k_cache, "V": v_cache, "Out": out, "LSE": lse, "PartO": part_o, "PartLSE": part_lse,
               "SeqLens": cache_seqlens, "Count": counts, "Sink": lse if sink is None else sink,  # unread without
               "BlockTable": cache_seqlens if block_table is None else block_table}
    run_planned(_PLANS, (*key, aligned(q, k_cache, v_cache, out, cache_seqlens)),
                lambda: launches(q, k_cache, v_cache, out, scale, window, tiles, softcap, sink is not None,
                                 block_table), tensors)
    return out, lse
