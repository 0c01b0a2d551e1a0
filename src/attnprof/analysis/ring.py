"""Which parallelism a job's communication serves, from its kernels alone. Imports no torch.

Ring attention (context parallelism) has a signature: the K/V blocks travel between the ranks by
point-to-point (`SendRecv`, what torch's all-to-all rotation and a ring's send/recv launch) or all-gather
collectives issued right around the attention kernels, and each call runs several attention kernels (one per
K/V block) whose partial results are merged. So a collective that moves K/V is one next to an attention
kernel on its GPU: within REACH non-communication kernels of one, in start order. A job whose NCCL traffic is
all-reduce (gradients: DDP), all-gather/reduce-scatter of weights away from attention (FSDP, ZeRO) or none
next to attention shows no ring, whatever its kernels are called.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass

import numpy as np

from attnprof.analysis.activities import KINDS
from attnprof.analysis.attribution import Analysis, Forward
from attnprof.analysis.comm import is_comm
from attnprof.analysis.queries import gpu_named, per
from attnprof.gpu import kernel_names as kn

REACH = 3  # non-communication kernels between a K/V transfer and the attention kernel it feeds or follows
_KV_EXCHANGE = re.compile(r"^nccl\w*?_(SendRecv|Send|Recv|AllGather|AllToAll)")
_COLLECTIVE = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")


def is_kv_exchange(name: str) -> bool:
    """An NCCL kernel of the kinds that move K/V blocks in a ring (point-to-point, all-gather, all-to-all)."""
    return _KV_EXCHANGE.match(name) is not None


def collective_of(name: str) -> str:
    """The collective an NCCL kernel runs (`AllReduce`, `SendRecv`, ...), from its name."""
    m = _COLLECTIVE.match(name)
    return m.group(1) if m else "other"


@dataclass(frozen=True)
class Parallelism:
    """Per region instance (medians): K/V exchanges next to attention kernels and attention kernels; over
    the region: communication time by collective."""

    kv_exchanges: int
    attention_kernels: int
    comm_us_by_collective: dict[str, float]

    @property
    def ring_attention(self) -> bool:
        """Ring attention's signature: K/V moved around attention calls that run in several pieces."""
        return self.kv_exchanges >= 1 and self.attention_kernels >= 2

    @property
    def main_collective(self) -> str | None:
        by = self.comm_us_by_collective
        return max(by, key=by.__getitem__) if by else None

    def as_dict(self) -> dict:
        return {"ring_attention": self.ring_attention, "kv_exchanges_next_to_attention": self.kv_exchanges,
                "attention_kernels": self.attention_kernels, "main_collective": self.main_collective,
                "comm_us_by_collective": {k: round(v, 3) for k, v in self.comm_us_by_collective.items()}}


def parallelism(a: Analysis) -> Parallelism:
    """What the job's communication is for, once per analysis."""
    return per(a, "parallelism", a, _parallelism)


def _parallelism(a: Analysis) -> Parallelism:
    counts = [_instance(a, fwd) for fwd in a.forwards if len(fwd.gpu.dur)]
    by: Counter = Counter()
    for fwd in a.forwards:
        gpu = fwd.gpu
        at = np.flatnonzero((gpu.kind == KINDS.index("kernel")) & gpu_named(a, gpu, is_comm))
        for name, dur in zip(gpu.names_at(at.tolist()), gpu.dur[at].tolist(), strict=True):
            by[collective_of(name)] += dur / len(a.forwards)
    if not counts:
        return Parallelism(0, 0, dict(by))
    exchanges, attention = zip(*counts, strict=True)
    return Parallelism(statistics.median_low(exchanges), statistics.median_low(attention), dict(by))


def _instance(a: Analysis, fwd: Forward) -> tuple[int, int]:
    """(K/V exchanges next to an attention kernel, attention kernels) of one instance, per GPU in start order."""
    gpu = fwd.gpu
    kernel = gpu.kind == KINDS.index("kernel")
    comm = kernel & gpu_named(a, gpu, is_comm)
    kv = comm & gpu_named(a, gpu, is_kv_exchange)
    attention = kernel & ~comm & gpu_named(a, gpu, kn.is_attention, kn.ATTENTION)
    devices = [s.device if s is not None else None for s in gpu.arg_sets] + [None]  # args code -1: none
    device = np.array([hash(devices[c]) for c in gpu.args.tolist()], np.int64) if len(gpu.args) else gpu.args
    near = 0
    for dev in np.unique(device).tolist():
        mine = np.flatnonzero(device == dev)
        mine = mine[np.argsort(gpu.ts[mine], kind="stable")]
        others = mine[kernel[mine] & ~comm[mine]]  # the non-communication kernels, in start order
        seen = np.concatenate(([0], np.cumsum(attention[others])))  # attention kernels among the first k
        place = np.searchsorted(gpu.ts[others], gpu.ts[mine[kv[mine]]], side="right")
        lo, hi = np.maximum(place - REACH, 0), np.minimum(place + REACH, len(others))
        near += int(np.count_nonzero(seen[hi] > seen[lo]))
    return near, int(np.count_nonzero(attention))
