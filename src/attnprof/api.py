"""The Python API; it mirrors the CLI (`attnprof run` -> `attnprof.run(...)`). Where the CLI takes
`file.py:factory`, the API also takes a module and its example inputs (`lint(model, inputs=(x,))`), and
what it returns is the result dict that shows itself as a table in a notebook (report.notebook.Result)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from attnprof.errors import UserError
from attnprof.options import RunOptions
from attnprof.problem import Problem
from attnprof.problem import default_problem as _default_problem

if TYPE_CHECKING:  # the pipeline (NumPy with it) is imported where a trace is analysed, not with the API
    from attnprof.pipeline.one_trace import Progress


def default_problem(device: str, options: RunOptions | None = None) -> tuple[Problem, bool]:
    """The article's problem on a GPU, a smaller one on CPU, with the sizes `options` give; True when the
    CPU default was used."""
    return _default_problem(device, (options or RunOptions()).problem_fields)


def options_of(options: RunOptions | None, given: dict) -> RunOptions:
    """`options` (default: every default) with the keyword options of a call on top; an unknown keyword
    is a TypeError naming it, as for any function."""
    return replace(options or RunOptions(), **given)


def run(variants: str | list[str] | None = None, *, options: RunOptions | None = None, listener=None,
        target=None, inputs=None, **given) -> dict:
    """Profile attention variants side by side; returns the `attnprof.run/1` results.

    The run options (attnprof.options.RunOptions: batch, heads, seq, head_dim, dtype, mode, kv_heads, mask,
    dense_mask, q_len, device, compile, kernel, out, repeats, warmup, schedule, region, rotate_inputs,
    threads, graph, ncu, ...) come as `options`, as keywords, or both (keywords win). The results also land
    in a new folder under `out` (results.json, a Chrome trace and a key_averages table per variant);
    `results["run_dir"]` names it. `target` (`path/to/file.py:factory`, or a module with its example
    `inputs`) adds the user's own module as one more variant; with a target and no `variants`, only the
    target runs. The region defaults to "attn_step" around a training step, else "attn_fwd". `ncu` adds
    Nsight Compute's counters for each variant's kernels (results["ncu"] says how that went).
    """
    from attnprof.fix.target import as_target, target_variant
    from attnprof.harness.runner import RunConfig, resolve_device
    from attnprof.harness.runner import run as run_variants
    from attnprof.report.notebook import Result

    options = options_of(options, {**given, **({"variants": variants} if variants is not None else {})})
    own = [as_target(target, inputs)] if target is not None else []  # fails before any work
    targets = tuple(map(target_variant, own))
    names = _variant_names(options.variants, bool(targets))
    device = resolve_device(options.device)
    problem, _ = default_problem(device, options)
    config = RunConfig(problem=problem, variants=names, device=device, options=options, targets=targets)
    results, run_dir = run_variants(config, listener)
    if own:  # its own problem, and its error against a float64 run of itself
        from attnprof.files import write_json_atomic
        from attnprof.harness.target_facts import add_target_facts

        add_target_facts(results, own, device)
        write_json_atomic(run_dir / "results.json", results)
    if options.ncu:
        from attnprof.files import write_json_atomic
        from attnprof.harness.ncu import add_ncu

        add_ncu(results, config)
        write_json_atomic(run_dir / "results.json", results)
    return Result({**results, "run_dir": str(run_dir)})


def sweep(grid: dict | None = None, *, options: RunOptions | None = None, resume: str | Path | None = None,
          listener=None, **given) -> dict:
    """Run the variants over every combination of `grid`'s values (`{"seq": [512, 1024], "dtype": ["bf16"]}`;
    an axis left out takes the device's default problem) with the run options; returns `attnprof.sweep/1`:
    the sweep folder, one line per (point, variant) and the fitted scaling exponents. `resume` continues
    the interrupted sweep in that folder as it was defined (then no grid or options). The listener hears
    ("sweep", {"path", "total", "todo", "variants"}) first, so an interrupt can say where to resume."""
    from attnprof.harness.runner import resolve_device
    from attnprof.harness.sweep import SweepSpec, load_spec, new_sweep, run_sweep
    from attnprof.report.plots import scaling

    if resume is not None:
        if grid or options or given:
            raise UserError("a resumed sweep runs as its folder defines it: give no grid or options")
        spec, sweep_dir = load_spec(Path(resume)), Path(resume)
    else:
        options = options_of(options, given)
        device = resolve_device(options.device)
        options = replace(options, device=device, variants=_variant_names(options.variants, False),
                          out=str(options.out))
        spec = SweepSpec({a: tuple(v) for a, v in (grid or {}).items()}, options)
        sweep_dir = new_sweep(spec, Path(options.out))
    lines = run_sweep(spec, sweep_dir, listener)
    return {"sweep_dir": str(sweep_dir), "scaling": scaling(lines), "lines": lines}


def _variant_names(variants: str | list[str] | None, with_target: bool) -> tuple[str, ...]:
    """The variants asked for, each known and named once; a string is one name or a comma-separated
    list (`run("naive")` runs naive, as `--variants naive` does). None: all, or none beside a target."""
    from attnprof import variants as registry

    if variants is None:
        return () if with_target else tuple(registry.names())
    names = tuple(n.strip() for n in variants.split(",") if n.strip()) if isinstance(variants, str) else tuple(variants)
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"variants: {', '.join(map(repr, twice))} named more than once")
    for name in names:
        registry.get(name)  # unknown names fail here, before any work
    return names


def analyze(path: str | Path, region: str | None = None, max_bytes: int | None = None,
            workers: int | None = None, progress: Progress | None = None) -> dict:
    """Analyze a torch.profiler trace; returns the `attnprof.analysis/1` dict. `workers`: processes that read a
    big trace (32 MB or more) at once, one range of its events each (None: one per core this process may use).
    `progress(stage, done, total)`: told ("reading", bytes read, of how many: None for a gzip) after each
    piece of the trace, then ("analysing", 0, None): what `attnprof analyze` draws for a big trace."""
    from attnprof.pipeline.one_trace import analyze_path
    from attnprof.report.notebook import Result

    return Result(analyze_path(path, region, max_bytes, workers, progress))


def trace_size(path: str | Path) -> int:
    """About how many bytes of JSON a trace file holds: its size, a gzip's inflated size (its trailer's
    guess), 0 for a pipe (never opened for this); raises OSError when it cannot be read."""
    from attnprof.trace.source import json_size

    return json_size(Path(path))


def not_an_input(output: str | Path, inputs: list[str]) -> None:
    """A UserError when writing `output` would replace one of the `inputs` it is made from."""
    from attnprof.files import not_an_input as check

    check(output, inputs)


def analyze_step(path: str | Path, region: str | None = None, name: str = "step", history: bool = True,
                 db: str | Path | None = None, attn_implementation: str | None = None,
                 environment: dict | None = None, max_bytes: int | None = None) -> dict:
    """Analyze one trace of a training step, as the profiler handler does for each trace it writes: the
    `attnprof.analysis/1` dict (its `model_step` holds attention per layer and phase) plus `line`, the one
    line the handler logs, `advice`, what to change (`attn_implementation`: what transformers was told to
    run), and `history_run`, the run's id in the history when recorded (`history`; only rank 0 of a
    distributed job records: None elsewhere) with `environment` (default: this process's), or
    `history_error`, why the history write failed (the analysis stands)."""
    from attnprof.history import record, recording_rank
    from attnprof.history.records import from_trace
    from attnprof.pipeline.one_trace import analyze_path
    from attnprof.report.model_step import advice_line, step_line
    from attnprof.report.notebook import Result

    d = analyze_path(path, region, max_bytes)
    run_id, history_error = None, None
    if history and recording_rank():  # the environment is collected only where it is recorded
        import sqlite3

        command = f"attnprof.on_trace_ready ({name})"
        try:
            run_id = record(from_trace(d, name, command, environment or run_environment()), db)
        except (UserError, sqlite3.Error, OSError) as e:  # the analysis stands: only the history write failed
            history_error = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    return Result({**d, "line": step_line(d), "advice": advice_line(d, attn_implementation), "history_run": run_id,
                   "history_error": history_error})


def run_environment() -> dict:
    """What this process runs on, as the history records it (versions, GPU settings, git commit)."""
    from attnprof.history.environment import collect

    return collect()


def verify_attention(model, inputs: tuple | dict, implementation: str = "sdpa", device: str = "auto",
                     dtype: str | None = None) -> dict:
    """A transformers model against a copy of itself on `attn_implementation=implementation`, both in eval
    mode with the same weights, on `inputs` (one batch): outputs, forward latency and the profiles'
    difference, as `patch --to-sdpa --verify` measures a switch; `line` says what to change. The model
    itself is left as it is (two copies are made, in `dtype` ("bf16", "fp16") when given: what autocast
    trains in, not the fp32 master weights)."""
    import copy

    import torch

    from attnprof.fix.target import as_target
    from attnprof.fix.to_sdpa.verify import verify_switch
    from attnprof.harness.runner import resolve_device
    from attnprof.problem import DTYPES
    from attnprof.report.model_step import switch_line
    from attnprof.report.notebook import Result

    device = resolve_device(device)
    copies = [copy.deepcopy(model).eval() for _ in range(2)]
    if dtype is not None:
        copies = [m.to(getattr(torch, DTYPES[dtype])) for m in copies]
    before, after = (as_target(m, inputs).to(device) for m in copies)
    result = verify_switch(before, after, device, implementation=implementation)
    return Result({**result, "line": switch_line(result)})


def lint(target, inputs=None, device: str = "auto", grad: bool = False) -> dict:
    """Profile a target's forward and name the source line behind each finding (`attnprof.lint/1`).
    `target`: `file.py:factory`, `pkg.mod:factory`, or a module (any callable) with its example `inputs`."""
    from attnprof.fix.lint import lint_target
    from attnprof.fix.target import as_target, own_errors
    from attnprof.fix.to_sdpa.advice import advise
    from attnprof.harness.runner import resolve_device
    from attnprof.report.notebook import Result

    loaded = as_target(target, inputs)  # a bad target fails first, before torch looks for a device
    device = resolve_device(device)
    on_device = loaded.to(device)
    with own_errors(on_device):  # the user's forward failing on its own is one line, not an internal error
        report = lint_target(on_device, device, grad)
        # hand-written attention's fix: the call `rewrite --to-sdpa` would write there, or why none is equivalent
        return Result(report | {"findings": advise(report["findings"], on_device, grad)})


def cpu_default_problem(options: RunOptions) -> dict | None:
    """The smaller CPU problem `run` uses when no GPU is used and no size is given (as a dict); else None."""
    from attnprof.harness.runner import resolve_device

    _variant_names(options.variants, False)  # a misspelt variant is told now, not after torch's ~2 s import
    problem, shrunk = default_problem(resolve_device(options.device), options)
    return problem.as_dict() if shrunk else None


def is_rank() -> bool:
    """Whether this process is a rank started by torchrun (or any launcher that sets its variables)."""
    from attnprof.harness.launch import is_worker

    return is_worker()


def launch_ranks(options: RunOptions, argv: list[str]) -> int:
    """`attnprof <argv>` (a `run` command line) on `options.nproc` local ranks under torch.distributed.run;
    its exit status. The options are checked first, so a bad one fails before any rank starts."""
    from attnprof.harness.distributed import check_launch, cp_config
    from attnprof.harness.launch import launch, without_nproc
    from attnprof.harness.runner import resolve_device

    check_launch(cp_config(options, resolve_device(options.device)), options.nproc)
    return launch(without_nproc(argv), options.nproc)


def run_ranks(options: RunOptions | None = None, *, listener=None, **given) -> dict | None:
    """Inside a rank that torchrun started: this rank's part of the multi-rank run (context parallelism
    over the ranks' shards of the sequence); rank 0 returns the `attnprof.cp-run/1` results, others None."""
    from attnprof.harness.distributed import cp_config, run_worker
    from attnprof.harness.runner import resolve_device

    options = options_of(options, given)
    return run_worker(cp_config(options, resolve_device(options.device)), listener)


def analyze_ranks(traces: list[str | Path], region: str | None = None, max_bytes: int | None = None,
                  workers: int | None = None, meanwhile: Callable[[], None] | None = None,
                  progress: Progress | None = None, client=None) -> dict:
    """Analyze several ranks' traces (files, folders of them, globs, fsspec URLs) at once; returns
    `attnprof.ranks/1`. `meanwhile`, if given, runs in this process while the traces are read; `progress(stage,
    done, total)` is told ("ranks", traces analysed, of how many) as they are done. With a Dask distributed
    `client` (`pip install 'attnprof[cluster]'`; see `cluster`) the cluster's workers read the traces where
    they lie and only their summaries travel; the result's "cluster" says which ranks were re-run."""
    traces = [str(t) for t in traces]
    if client is not None:
        from attnprof.pipeline.cluster import analyze_ranks_on

        return analyze_ranks_on(client, traces, region, max_bytes, meanwhile, progress)
    from attnprof.pipeline.ranks import analyze_ranks as analyze_all

    return analyze_all(traces, region, max_bytes, workers, meanwhile, progress)


def cluster(address: str):
    """A context manager giving a Dask client for `analyze_ranks(..., client=)`: `local` (a LocalCluster on
    this machine), `tcp://host:port`, or a scheduler file; a UserError when Dask is not installed."""
    from attnprof.pipeline.cluster import connect

    return connect(address)


def diff(a: str | Path, b: str | Path, region: str | None = None) -> dict:
    """Compare two traces, or two variants of runs (`results.json:VARIANT`, `RUN_DIR:VARIANT`); `attnprof.diff/1`."""
    from attnprof.analysis.diff import diff as diff_sides
    from attnprof.pipeline.one_trace import load_side

    return diff_sides(load_side(str(a), region), load_side(str(b), region))


def variants(device: str = "auto", kernel: str | None = None) -> dict:
    """Every registered variant and whether it can run here (and why not): `{"device", "variants": [...]}`."""
    from attnprof import variants as registry
    from attnprof.harness.runner import resolve_device

    device = resolve_device(device)
    problem, _ = default_problem(device)
    rows = []
    for name, variant in registry.REGISTRY.items():
        reason = registry.why_not(variant, problem, device, kernel)
        loads = variant.source(kernel) if variant.source and kernel else None  # the kernel it would load
        rows.append({"name": name, "family": variant.family, "layout": variant.layout,
                     "description": f"{variant.description}; {loads}" if loads else variant.description,
                     "runs_here": reason is None, "reason": reason})
    return {"device": device, "variants": rows}


def report(folder: str | Path) -> Path:
    """Write report.html for a run, `run --nproc` or sweep folder (the page its schema asks for); its path."""
    from attnprof.report.folder import write_folder_report

    return write_folder_report(folder)


def history(db: str | Path | None = None, since: str | None = None, variant: str | None = None) -> dict:
    """The recorded runs, newest first, with what changed between them (`attnprof.history/1`)."""
    from attnprof.history import history as recorded

    return recorded(db, since=since, variant=variant)


def compare(a: int | None = None, b: int | None = None, *, db: str | Path | None = None,
            threshold: float | None = None) -> dict:
    """Run B against run A of the history, per variant (`attnprof.compare/1`; "regressed" is the gate).
    Defaults: B the latest run, A the previous run of B's problem on B's kind of device, 5%."""
    from attnprof.history import DEFAULT_THRESHOLD, compare_runs

    return compare_runs(db, a=a, b=b, threshold=DEFAULT_THRESHOLD if threshold is None else threshold)


def record(kind: str, result: dict, command: str, db: str | Path | None = None) -> tuple[int | None, Path]:
    """Record a `run`, `cp-run` (run --nproc), `sweep`, `lint` or `verify` result in the history (the default
    store unless `db`); (the run's id, None where this rank does not record, and the store's path)."""
    from attnprof.history import default_path, records
    from attnprof.history import record as store
    from attnprof.history.environment import collect

    path = Path(db) if db else default_path()
    return store(records.of_kind(kind, result, command, collect()), path), path


def rewrite(target: str, *, to_sdpa: bool = False, device: str = "auto", grad: bool = False,
            strict: bool = False) -> dict:
    """Plan the source rewrite of `target` (`file.py:factory`): safe out-of-place masked_fills made in place,
    or with `to_sdpa` hand-written attention made one F.scaled_dot_product_attention call where it is provably
    the same. Each rewrite is checked against the original in a copy first (fix.differential: same weights in
    float64, the target's inputs and the ones a factory never makes, train and MC-dropout modes, outputs,
    gradients, double backward and jvp, what is left in inputs and buffers, then the rounding in the model's
    dtype); one that differs is in the plan as refused with what differed, and not in "sources"; with
    `strict`, so is one that loses autograd the original supports. Returns {"plan": the edits (or rewrites)
    with their reasons, "checked": the verdict (README, `--to-sdpa`), "sources": {file: (old, new)},
    "diff": the unified diff, "target", "device", "grad", "to_sdpa"}. Nothing is written: `verify_rewrite`
    profiles before and after, `write_rewrite` applies it."""
    from attnprof.fix.rewrite import plan
    from attnprof.fix.target import load_target, own_errors
    from attnprof.harness.runner import resolve_device

    loaded = load_target(target)  # a bad target fails first, before torch looks for a device
    device = resolve_device(device)
    on_device = loaded.to(device)
    with own_errors(on_device):  # the user's forward failing on its own is one line, not an internal error
        return plan(target, on_device, device, grad, to_sdpa, strict)


def verify_rewrite(rewritten: dict) -> dict:
    """Profile `rewrite`'s target before and after its rewrite; outputs that differ, or a rewritten forward
    that raises, are one UserError (write nothing then). A to-SDPA plan that found the attention in an
    installed package verifies the configured switch instead."""
    from attnprof.fix.rewrite import verify_plan

    return verify_plan(rewritten)


def write_rewrite(rewritten: dict) -> list[Path]:
    """Apply `rewrite`'s edits to the files, keeping each original as <file>.orig; the files written."""
    from attnprof.fix.source_io import write

    return write(rewritten["sources"])
