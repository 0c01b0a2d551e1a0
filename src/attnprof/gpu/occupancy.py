"""Theoretical occupancy, the arithmetic of CUDA's occupancy calculator (cuda_occupancy.h).

Resident blocks per SM are the minimum over four limits: registers (allocated per warp in units
of 256; each warp lives in one of the SM's 4 sub-partitions, whose register files are separate),
shared memory (with the per-block reserve from sm80 on), threads (warps) per SM and blocks per
SM. Occupancy is resident warps over the SM's maximum (64 on sm80/sm90).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

REG_UNIT = 256  # registers are allocated per warp in units of 256
SUB_PARTITIONS = 4  # an SM's register file is split over 4 warp schedulers
MAX_BLOCKS = 32  # resident blocks per SM on sm80/sm90 (deviceProperties does not record it)
LIMIT_NAMES = {"registers": "registers", "shared memory": "shared memory", "threads": "threads per SM",
               "blocks": "blocks per SM"}


@dataclass(frozen=True)
class Occupancy:
    fraction: float
    blocks_per_sm: int
    warps_per_sm: int
    max_warps: int
    limiter: str
    limits: dict[str, int]


def theoretical(regs: int, smem: int, threads: int, props: dict) -> Occupancy | None:
    """Occupancy of a block of `threads` using `regs` registers per thread and `smem` bytes of shared
    memory, on the device `props` describes; None when props lack what the arithmetic needs. The result
    is shared by every call with the same inputs (a trace of unique names asks for each of 18k kernels):
    read-only."""
    facts = (regs, smem, threads, *map(props.get, _PROPS), props.get("maxBlocksPerMultiProcessor", MAX_BLOCKS))
    try:
        return _occupancy(*facts)
    except TypeError:  # a property of an odd type (a list?) cannot key the cache
        return _occupancy.__wrapped__(*facts)


_PROPS = ("warpSize", "computeMajor", "maxThreadsPerMultiprocessor", "regsPerMultiprocessor",
          "sharedMemPerMultiprocessor")


@lru_cache(maxsize=4096, typed=True)  # typed: 2 and 2.0 are told apart, as the result's types are
def _occupancy(regs: int, smem: int, threads: int, warp: int | None, major: int | None, max_threads: int | None,
               regs_sm: int | None, smem_sm: int | None, max_blocks: int) -> Occupancy | None:
    if not (warp and max_threads and regs_sm and smem_sm and major) or threads <= 0:
        return None
    max_warps, warps = max_threads // warp, math.ceil(threads / warp)
    limits = {}
    if regs > 0:
        per_warp = math.ceil(regs * warp / REG_UNIT) * REG_UNIT
        limits["registers"] = (regs_sm // SUB_PARTITIONS // per_warp) * SUB_PARTITIONS // warps
    # From sm80 on CUDA reserves 1 KiB of shared memory per block (cudaDevAttrReservedSharedMemoryPerBlock)
    # and allocates it in 128-byte units. sharedMemPerMultiprocessor (228 KiB on H200) includes the reserve
    # (hence sharedMemPerBlockOptin = 227 KiB): without it, two 114 KiB blocks would wrongly fit on one SM.
    reserve, unit = (1024, 128) if major >= 8 else (0, 256)
    per_block = math.ceil((smem + reserve) / unit) * unit
    if per_block:  # before sm80 a block without shared memory takes none
        limits["shared memory"] = smem_sm // per_block
    limits["threads"] = max_warps // warps
    limits["blocks"] = max_blocks
    blocks = min(limits.values())
    resident = min(blocks * warps, max_warps)
    limiter = " and ".join(LIMIT_NAMES[k] for k, v in limits.items() if v == blocks)  # every tied limit
    return Occupancy(resident / max_warps, blocks, resident, max_warps, limiter, limits)
