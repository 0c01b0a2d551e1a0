"""Attention steps on one rank's shard of the sequence, under PyTorch's own context parallelism.

SDPA runs under `torch.distributed.tensor.experimental.context_parallel`, which shards q, k, v in
place along the sequence and swaps F.scaled_dot_product_attention for ring attention (flash,
efficient and cuDNN backends; K/V blocks rotate by all-gather or all-to-all). flex_attention runs
through the module API (`_ContextParallel` with a context-parallel block mask), which all-gathers
K/V once. Neither has CPU kernels: on CPU each rank runs its variant on its own contiguous shard,
with no communication, which is enough to exercise launching, tracing and merging.

Tensors that require grad cannot be resized, and context_parallel resizes its buffers on the way
in and out: a training step (harness.steps.training_step) makes the shards require grad inside the
context, and `sharded` clears it before leaving.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from attnprof import variants as registry
from attnprof.problem import Problem
from attnprof.variants.base import BuildOptions

if TYPE_CHECKING:
    import torch

# SDPA's ring backends, then flex; efficient last: its ring backward aborted the process on 2 x H200 with
# torch 2.11 (an illegal memory access cannot be caught, so nothing after it would run)
CP_VARIANTS = ("sdpa-cudnn", "sdpa-flash", "flex", "sdpa-efficient")
ROTATE_METHODS = ("allgather", "alltoall")
MODES = ("fwd", "train")
SHARD_LOCAL = "shard-local (no context parallelism: each rank attends within its own shard)"


@dataclass(frozen=True)
class CPOptions:
    rotate: str = "allgather"  # how K/V blocks travel around the ring
    load_balance: bool = True  # head-tail sharding of the causal sequence


def cp_support(name: str, device: str) -> str | None:
    """None when `name` runs under context parallelism on `device`; else why not."""
    if device != "cuda":
        return "torch's context_parallel has no CPU attention kernels"
    if name not in CP_VARIANTS:
        return f"torch's context parallelism covers {', '.join(CP_VARIANTS)}"
    return None


@contextmanager
def sharded(name: str, problem: Problem, mesh, inputs: Sequence[torch.Tensor], options: CPOptions
            ) -> Iterator[tuple[Callable, list, str]]:
    """The forward to call on this rank's shards, the shards, and how the sequence was split. A training
    step may make the shards require grad; they stop requiring it before the context resizes them back."""
    device = inputs[0].device.type
    if cp_support(name, device) is not None:
        context, how = _local_shard(name, problem, mesh, inputs), SHARD_LOCAL
    elif name == "flex":
        context, how = _flex(problem, mesh, inputs, options), "context-parallel flex_attention (K/V all-gathered)"
    else:
        context = _ring(name, problem, mesh, inputs, options)
        how = f"ring attention, {options.rotate} rotation" + (", load-balanced" * options.load_balance)
    with context as (forward, shards):
        try:
            yield forward, shards, how
        finally:
            for t in shards:
                t.requires_grad_(False)


@contextmanager
def whole(name: str, problem: Problem, inputs: Sequence[torch.Tensor]) -> Iterator[tuple[Callable, list]]:
    """The same forward on the full sequence on one device: the single-GPU time the ideal divides."""
    forward = registry.get(name).build(problem, inputs[0].device.type, BuildOptions())
    yield forward, [t.clone() for t in inputs]


@contextmanager
def _ring(name: str, problem: Problem, mesh, inputs, options: CPOptions) -> Iterator[tuple[Callable, list]]:
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import _cp_options, set_rotate_method

    forward = registry.get(name).build(problem, inputs[0].device.type, BuildOptions())
    buffers = [t.clone() for t in inputs]  # sharded in place; the caller's inputs stay whole
    set_rotate_method(options.rotate)
    before = _cp_options.enable_load_balance
    _cp_options.enable_load_balance = options.load_balance  # read when the context is entered
    try:
        with context_parallel(mesh, buffers=buffers, buffer_seq_dims=[2, 2, 2], no_restore_buffers=set(buffers)):
            yield forward, buffers
    finally:
        _cp_options.enable_load_balance = before


@contextmanager
def _flex(problem: Problem, mesh, inputs, options: CPOptions) -> Iterator[tuple[Callable, list]]:
    import torch
    from torch.distributed.tensor.experimental._attention import (
        _context_parallel_shard,
        _ContextParallel,
        _HeadTailLoadBalancer,
    )
    from torch.distributed.tensor.experimental._context_parallel._attention import _create_cp_block_mask
    from torch.distributed.tensor.parallel import parallelize_module
    from torch.nn.attention.flex_attention import flex_attention

    from attnprof.variants.flex import mask_mod

    class Flex(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attend = torch.compile(flex_attention)

        def forward(self, q, k, v, block_mask):
            return self.attend(q, k, v, block_mask=block_mask)

    device = inputs[0].device
    balancer = _HeadTailLoadBalancer(problem.seq, mesh.size(), device) if options.load_balance else None
    mask = _create_cp_block_mask(mask_mod(problem, device.type), None, None, problem.seq, problem.seq, mesh, balancer)
    style = _ContextParallel(seq_dim=2, attention_type=_ContextParallel.AttentionType.FLEX)
    module = parallelize_module(Flex(), mesh, style)
    shards = list(_context_parallel_shard(mesh, list(inputs), [2, 2, 2], load_balancer=balancer))
    yield (lambda q, k, v: module(q, k, v, block_mask=mask)), shards


@contextmanager
def _local_shard(name: str, problem: Problem, mesh, inputs) -> Iterator[tuple[Callable, list]]:
    world, rank = mesh.size(), mesh.get_local_rank()
    piece = problem.seq // world
    local = replace(problem, seq=piece, q_len=None)  # q_len follows seq
    forward = registry.get(name).build(local, inputs[0].device.type, BuildOptions())
    yield forward, [t[:, :, rank * piece:(rank + 1) * piece].contiguous() for t in inputs]
