"""`attnprof run --nproc N`: the same run on N ranks, launched by torch's own launcher.

The parent only starts `python -m torch.distributed.run --standalone --nproc_per_node N -m attnprof
run ...`; each rank it starts finds itself under torchrun (the environment says so) and runs every
(variant, mode) case on its shard of the sequence: NCCL on GPUs, gloo on CPU. Each rank times its
steps, writes its own trace and analyses it where it was written (pipeline.ranks.rank_summary);
only those summaries and the timing samples travel, through torch.distributed's gather_object, and
rank 0 merges them into one results.json. Several nodes are the same program under
`torchrun --nnodes ...`: nothing here assumes one machine beyond the default `--standalone` launch.

Timings: all ranks start each repeat together (a barrier), run n steps back to back between CUDA
events, and a repeat's step time is that of its slowest rank. The ideal is the full problem's time
on one GPU (run on rank 0 while the others wait, when it fits) divided by N.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path

from attnprof.contracts import RESULTS, CPRunResult
from attnprof.files import new_run_dir, write_json_atomic
from attnprof.harness.failures import classify
from attnprof.harness.measure import Spread, block_us
from attnprof.options import PROBLEM, REGION, STEP_REGION, RunOptions
from attnprof.pipeline.ranks import merge, rank_summary
from attnprof.problem import Mask, Problem, make_inputs
from attnprof.variants.context_parallel import CP_VARIANTS, MODES, CPOptions, cp_support, sharded, whole

CP_GPU_DEFAULT = dict(batch=1, heads=16, seq=32768, head_dim=128)  # the measured reference problem
CP_CPU_DEFAULT = dict(batch=1, heads=4, seq=512, head_dim=64)
BLOCK_US = 20000.0  # a repeat times at least this much work (a barrier and a sync sit between repeats)
Listener = Callable[[str, dict], None]


@dataclass(frozen=True)
class CPRunConfig:
    """A multi-rank run's options with what they resolve to (see `cp_config`)."""

    problem: Problem
    variants: tuple[str, ...]
    modes: tuple[str, ...] = MODES
    device: str = "cuda"  # cuda: NCCL, one GPU per local rank; cpu: gloo
    options: RunOptions = field(default_factory=RunOptions)
    timeout_s: int = 600  # a rank stuck in a collective gives up after this

    @property
    def cp(self) -> CPOptions:
        return CPOptions(self.options.cp_rotate, self.options.load_balance)


def cp_config(options: RunOptions, device: str) -> CPRunConfig:
    """The multi-rank run `options` ask for on `device` (resolved); a ValueError for what it cannot run,
    before any rank starts."""
    problem = Problem(**{**(CP_GPU_DEFAULT if device == "cuda" else CP_CPU_DEFAULT),
                         **{k: v for k, v in options.problem_fields.items() if k in CP_GPU_DEFAULT}},
                      dtype=options.dtype)
    modes = (options.mode,) if options.mode else options.cp_modes  # --mode picks one
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ValueError(f"with --nproc: mode {', '.join(bad)} is not run; choose from {', '.join(MODES)}")
    if options.mask not in (None, Mask("causal")) or options.kv_heads or options.dense_mask or options.q_len:
        raise ValueError("with --nproc: causal multi-head attention only (--mask, --kv-heads, --dense-mask, "
                         "--q-len are for single-GPU runs)")
    variants = options.variants or (CP_VARIANTS if device == "cuda" else ("sdpa-auto",))
    return CPRunConfig(problem=problem, variants=tuple(variants), modes=tuple(modes), device=device, options=options)


@dataclass
class _Rank:
    rank: int
    world: int
    device: str
    mesh: object
    inputs: tuple
    run_dir: Path


def check_launch(config: CPRunConfig, world: int) -> None:
    """What can be wrong before any rank starts, checked once in the parent (a rank that found it would
    print it once per rank, then torchrun its own report): the sequence shards, the variants are known,
    there are GPUs enough. ValueError, one line."""
    from attnprof import variants as registry

    step = 2 * world  # head-tail load balancing: each rank takes one chunk from each end
    if config.problem.seq % step:
        fits = max(step, config.problem.seq // step * step)
        raise ValueError(f"--seq {config.problem.seq} does not split into 2 x {world} equal shards (--nproc "
                         f"{world}, load-balanced): give a multiple of {step}, e.g. --seq {fits}")
    for name in config.variants:
        registry.get(name)
    if config.device == "cuda":
        import torch

        if world > torch.cuda.device_count():
            raise ValueError(f"--nproc {world}: one GPU per rank, and {torch.cuda.device_count()} are visible")


def run_worker(config: CPRunConfig, listener: Listener | None = None) -> dict | None:
    """Run every case on this rank; rank 0 returns the merged results, the others None."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    device = config.device
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if device == "cuda" else "gloo", timeout=timedelta(seconds=config.timeout_s),
                            **({"device_id": torch.device("cuda", local)} if device == "cuda" else {}))
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        check_launch(config, world)  # started by torchrun directly (several nodes), it is checked here
        run_dir = _shared_run_dir(config, rank, world)
        ctx = _Rank(rank, world, device, init_device_mesh(device, (world,)),
                    make_inputs(config.problem, device), run_dir)
        merged = _run_cases(config, ctx, listener or (lambda event, record: None))
        # every rank past its last collective before any tears down; a finished gloo rank still aborted once
        # after this (CI, "terminate called without an active exception"); the rank's command line now ends
        # without the process's own teardown (cli.finish)
        dist.barrier()
        return merged
    finally:
        dist.destroy_process_group()


def _shared_run_dir(config: CPRunConfig, rank: int, world: int) -> Path:
    import torch.distributed as dist

    box = [str(new_run_dir(config.options.out, f"{config.problem.tag}_cp{world}")) if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    path = Path(box[0])
    path.mkdir(parents=True, exist_ok=True)  # another node without a shared file system
    return path


def _run_cases(config: CPRunConfig, ctx: _Rank, notify: Listener) -> dict | None:
    from attnprof.harness.runner import device_info

    results = CPRunResult(device=device_info(ctx.device), problem=config.problem.as_dict(),
                          config=_config_dict(config, ctx), run_dir=str(ctx.run_dir)).to_payload()
    for name in config.variants:
        for mode in config.modes:
            if ctx.rank == 0:
                notify("start", {"name": name, "mode": mode})
            gathered = _gather(_case_on_rank(name, mode, config, ctx), ctx)
            single = _single_gpu(name, mode, config, ctx) if ctx.rank == 0 and config.options.single else None
            _barrier()
            if ctx.rank == 0:
                record = case_record(name, mode, gathered, single, ctx.world)
                results["variants"].append(record)
                write_json_atomic(ctx.run_dir / RESULTS, results)
                notify("done", record)
    return results if ctx.rank == 0 else None


def _config_dict(config: CPRunConfig, ctx: _Rank) -> dict:
    given = {k: v for k, v in asdict(config.options).items() if k not in PROBLEM}
    return {**given, "variants": config.variants, "modes": config.modes, "options": asdict(config.cp),
            "out": str(config.options.out), "timeout_s": config.timeout_s, "world_size": ctx.world,
            "device": ctx.device, "backend": "nccl" if ctx.device == "cuda" else "gloo",
            "launcher": "torch.distributed.run"}


def _case_on_rank(name: str, mode: str, config: CPRunConfig, ctx: _Rank) -> dict:
    """This rank's part of one case: timing samples, its trace and the trace's summary. Every rank
    agrees that the first step worked before timing, so one rank's failure never leaves the others
    waiting in a collective."""
    from attnprof.harness.profiling import profile_call

    record = {"rank": ctx.rank, "status": "ok", "reason": None}
    region = config.options.region or (STEP_REGION if mode == "train" else REGION)
    trace = ctx.run_dir / f"{config.problem.tag}_{name}_{mode}_rank{ctx.rank}.json.gz"
    _reset_peak(ctx.device)
    with ExitStack() as stack:
        try:
            forward, shards, record["sharding"] = stack.enter_context(
                sharded(name, config.problem, ctx.mesh, ctx.inputs, config.cp))
            step = _step(forward, shards, mode)
            step()
        except Exception as e:  # noqa: BLE001 - a failing case is recorded, the run goes on
            record |= classify(e, [])
        if not _everyone_ok(record["status"] == "ok"):
            return _skipped(record, ctx)
        try:
            record["samples_us"] = _time_steps(step, ctx.device, config, together=True)
            record["peak_memory_bytes"] = _peak(ctx.device)
            profile_call(step, trace, ctx.device, region, config.options.schedule)
            record["trace"] = trace.name
        except Exception as e:  # noqa: BLE001
            return _skipped(record | classify(e, []), ctx)
    try:
        record["summary"] = rank_summary(trace, region)
    except Exception as e:  # noqa: BLE001 - the timings stand even if the analysis fails
        record |= {"status": "error", "reason": f"analysing {trace.name}: {classify(e, [])['reason']}"}
    _free(ctx.device)
    return record


def _skipped(record: dict, ctx: _Rank) -> dict:
    if record["status"] == "ok":
        record |= {"status": "skipped", "reason": "another rank failed"}
    _free(ctx.device)
    return record


def _everyone_ok(ok: bool) -> bool:
    import torch.distributed as dist

    box = [None] * dist.get_world_size()
    dist.all_gather_object(box, ok)
    return all(box)


def _single_gpu(name: str, mode: str, config: CPRunConfig, ctx: _Rank) -> dict:
    """The full problem on rank 0's device alone (the others wait at a barrier)."""
    if cp_support(name, ctx.device) is not None:
        return {"status": "skipped", "reason": "each rank attended within its own shard only: less work than "
                                                "the full problem, so no ideal or speed-up"}
    try:
        with whole(name, config.problem, ctx.inputs) as (forward, tensors):
            samples = _time_steps(_step(forward, tensors, mode), ctx.device, config, together=False)
        return {"status": "ok", "us": Spread.of(samples).as_dict()}
    except Exception as e:  # noqa: BLE001 - no ideal then, said why
        return classify(e, [])
    finally:
        _free(ctx.device)


def _step(forward, tensors: list, mode: str):
    """One call of the case: a forward without autograd, or forward + backward (the runner's training step)."""
    import torch

    from attnprof.harness.steps import training_step

    if mode == "train":
        train = training_step(forward, tuple(tensors))
        return lambda: train(*tensors)

    def forward_step():
        with torch.no_grad():
            return forward(*tensors)

    return forward_step


def _time_steps(step, device: str, config: CPRunConfig, together: bool) -> list[float]:
    """Per repeat, the mean step time of n back-to-back steps (µs); n agreed by all ranks when together."""
    import torch.distributed as dist

    for _ in range(config.options.warmup):
        step()
    one = block_us(step, 1, device)
    if together:
        box = [None] * dist.get_world_size()
        dist.all_gather_object(box, one)
        one = max(box)
    n = max(1, min(200, int(BLOCK_US / max(one, 1.0))))  # steps per repeat: long enough to time well
    samples = []
    for _ in range(config.options.repeats):
        if together:
            dist.barrier()
        samples.append(block_us(step, n, device) / n)
    return samples


def case_record(name: str, mode: str, gathered: list[dict], single: dict | None, world: int) -> dict:
    """One case of the merged results: the slowest rank's step time, the ideal and the merged analysis."""
    failed = [g for g in gathered if g["status"] != "ok"]
    record = {"name": name, "mode": mode, "status": failed[0]["status"] if failed else "ok",
              "reason": "; ".join(f"rank {g['rank']}: {g['reason']}" for g in failed) or None,
              "sharding": next((g.get("sharding") for g in gathered if g.get("sharding")), None)}
    if single is not None:
        record["single_gpu_us"] = single.get("us")
        record["single_gpu_reason"] = single.get("reason")
    if failed:
        return record
    repeats = min(len(g["samples_us"]) for g in gathered)
    slowest = [max(g["samples_us"][i] for g in gathered) for i in range(repeats)]
    step = Spread.of(slowest)
    record["step_us"] = {**step.as_dict(), "method": "back-to-back; each repeat's slowest rank"}
    record["per_rank_us"] = [round(statistics.median(g["samples_us"]), 3) for g in gathered]
    record["peak_memory_bytes"] = max((g.get("peak_memory_bytes") or 0) for g in gathered) or None
    record["traces"] = [g["trace"] for g in gathered]
    merged = merge([g["summary"] for g in gathered])
    record |= {k: merged[k] for k in ("ranks", "distributed", "findings", "warnings")}
    base = (single or {}).get("us")
    if base and step.median > 0:
        record["ideal_us"] = round(base["median"] / world, 3)
        record["speedup"] = round(base["median"] / step.median, 3)
        record["efficiency"] = round(record["ideal_us"] / step.median, 4)
    return record


def _gather(obj: dict, ctx: _Rank) -> list[dict]:
    import torch.distributed as dist

    box = [None] * ctx.world if ctx.rank == 0 else None
    dist.gather_object(obj, box, dst=0)
    return sorted(box, key=lambda g: g["rank"]) if box else []


def _barrier() -> None:
    import torch.distributed as dist

    dist.barrier()


def _reset_peak(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats()


def _peak(device: str) -> int | None:
    if device != "cuda":
        return None
    import torch

    return int(torch.cuda.max_memory_allocated())


def _free(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
        torch.cuda.empty_cache()
