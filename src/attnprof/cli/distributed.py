"""Several ranks: `attnprof run --nproc N` (context parallelism under torchrun) and `attnprof analyze`
over several traces or a folder of them. Registered by cli.profile onto its `run` and `analyze`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from attnprof.cli.args import name_list, positive_int


def add_run_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("several GPUs (context parallelism)")
    g.add_argument("--nproc", type=positive_int, default=None, metavar="N",
                   help="run on N local ranks under torch.distributed.run (NCCL on GPUs, gloo on CPU); "
                        "several nodes: torchrun --nnodes ... -m attnprof run ...")
    g.add_argument("--cp-rotate", choices=("allgather", "alltoall"), default="allgather",
                   help="how K/V blocks travel around the ring (default allgather, torch's)")
    g.add_argument("--no-load-balance", action="store_true", help="contiguous shards instead of head-tail")
    g.add_argument("--cp-modes", type=name_list, default=["fwd", "train"], metavar="fwd,train",
                   help="forward, training step (forward + backward), or both (default)")
    g.add_argument("--no-single", action="store_true", help="skip the full problem on one GPU (no ideal)")


def add_analyze_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=positive_int, default=None,
                   help="several traces: processes analysing them at once (default: one per CPU)")


def wants_ranks(args: argparse.Namespace) -> bool:
    """`run --nproc N`, or a rank started by torchrun."""
    if getattr(args, "nproc", None):
        return True
    from attnprof.harness.launch import is_worker

    return is_worker()


def several_traces(traces: list[str]) -> bool:
    return len(traces) > 1 or Path(traces[0]).is_dir()


def cmd_run_ranks(args: argparse.Namespace) -> int:
    from attnprof.harness.distributed import check_launch, run_worker
    from attnprof.harness.launch import is_worker, launch, without_nproc

    config = _config(args)  # a bad option fails here, before any rank starts
    if not is_worker():
        check_launch(config, args.nproc)
        return launch(without_nproc(args.argv), args.nproc)
    results = run_worker(config, _progress(args))
    if results is None:  # not rank 0: rank 0 reports for everyone
        return 0
    from attnprof.cli.history import remember_cp_run
    from attnprof.report import distributed as view
    from attnprof.report.terminal import console

    if args.json:
        print(json.dumps(results, indent=2))
    else:
        view.render_cp_run(results, console())
    remember_cp_run(args, results)
    if not args.no_report:
        print(f"attnprof: report {view.write_cp_report(results)}", file=sys.stderr)
    return 0 if all(r["status"] == "ok" for r in results["variants"]) else 1


def _progress(args: argparse.Namespace):
    from attnprof.report.distributed import progress

    return None if args.json else progress


def _config(args: argparse.Namespace):
    from attnprof.harness.distributed import CP_CPU_DEFAULT, CP_GPU_DEFAULT, CPRunConfig
    from attnprof.harness.runner import resolve_device
    from attnprof.problem import Problem
    from attnprof.variants.context_parallel import CP_VARIANTS, MODES, CPOptions

    device = resolve_device(args.device)
    given = {k: getattr(args, k) for k in ("batch", "heads", "seq", "head_dim") if getattr(args, k) is not None}
    problem = Problem(**{**(CP_GPU_DEFAULT if device == "cuda" else CP_CPU_DEFAULT), **given}, dtype=args.dtype)
    modes = [args.mode] if getattr(args, "mode", None) else args.cp_modes  # --mode picks one
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ValueError(f"with --nproc: mode {', '.join(bad)} is not run; choose from {', '.join(MODES)}")
    if getattr(args, "mask", None) not in (None, "causal") or any(
            getattr(args, k, None) for k in ("kv_heads", "dense_mask", "q_len")):
        raise ValueError("with --nproc: causal multi-head attention only (--mask, --kv-heads, --dense-mask, "
                         "--q-len are for single-GPU runs)")
    variants = args.variants or (CP_VARIANTS if device == "cuda" else ("sdpa-auto",))
    return CPRunConfig(problem=problem, variants=tuple(variants), modes=tuple(modes),
                       options=CPOptions(args.cp_rotate, not args.no_load_balance), out=Path(args.out),
                       repeats=args.repeats, warmup=args.warmup, schedule=tuple(args.schedule),
                       region=args.region, single=not args.no_single, device=device)


def cmd_analyze_ranks(args: argparse.Namespace) -> int:
    from attnprof.pipeline.ranks import analyze_ranks
    from attnprof.report import distributed as view
    from attnprof.report.terminal import console
    from attnprof.trace.reader import DEFAULT_MAX_BYTES

    result = analyze_ranks(args.trace, args.region, args.max_bytes or DEFAULT_MAX_BYTES, args.workers)
    for warning in result["warnings"]:
        print(f"attnprof: warning: {warning}", file=sys.stderr)
    if not result["ranks"]:
        from attnprof.errors import UserError

        raise UserError("no trace could be read")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        view.render_ranks(result, console())
    if args.html:
        print(f"attnprof: report {view.write_ranks_report(result, args.html)}", file=sys.stderr)
    return 0
