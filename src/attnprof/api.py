"""The Python API; it mirrors the CLI (`attnprof run` -> `attnprof.run(...)`). Where the CLI takes
`file.py:factory`, the API also takes a module and its example inputs (`lint(model, inputs=(x,))`), and
what it returns is the result dict that shows itself as a table in a notebook (report.notebook.Result)."""

from __future__ import annotations

from pathlib import Path

from attnprof.errors import UserError
from attnprof.harness import defaults
from attnprof.problem import ARTICLE, CPU_DEFAULT, Problem
from attnprof.trace.reader import DEFAULT_MAX_BYTES


def default_problem(device: str, **overrides) -> tuple[Problem, bool]:
    """The article's problem on a GPU, a smaller one on CPU; True when the CPU default was used."""
    given = {k: v for k, v in overrides.items() if v is not None}
    base = ARTICLE if device == "cuda" else CPU_DEFAULT
    shrunk = device != "cuda" and not any(k in given for k in ARTICLE)
    return Problem(**{**base, **given}), shrunk


def run(
    variants: list[str] | None = None, *, batch: int | None = None, heads: int | None = None,
    seq: int | None = None, head_dim: int | None = None, dtype: str = "bf16", device: str = "auto",
    compile: bool = False, kernel: str | None = None, out: str | Path = defaults.OUT_DIR,
    repeats: int = defaults.REPEATS, graph: bool = True, listener=None, target=None, inputs=None,
    warmup: int = defaults.WARMUP, schedule: tuple[int, int, int] = defaults.SCHEDULE, region: str | None = None,
    rotate_inputs: int = 1, threads: int | None = defaults.CPU_THREADS,
    mode: str | None = None, kv_heads: int | None = None, mask: str | None = None,
    dense_mask: bool = False, q_len: int | None = None, ncu: bool = False,
) -> dict:
    """Profile attention variants side by side; returns the `attnprof.run/1` results.

    The results also land in a new folder under `out` (results.json, a Chrome trace and a
    key_averages table per variant); `results["run_dir"]` names it. `target`
    (`path/to/file.py:factory`, or a module with its example `inputs`) adds the user's own module as one
    more variant; with a target and no `variants`, only the target runs. `mode` ("fwd", "train",
    "decode"), `kv_heads`, `mask`,
    `dense_mask` and `q_len` pick the workload (see attnprof.problem.Problem); the region defaults to
    "attn_step" around a training step, else "attn_fwd". `ncu` adds Nsight Compute's counters for each
    variant's kernels (results["ncu"] says how that went; see attnprof.harness.ncu).
    """
    from attnprof.fix.target import as_target, target_variant
    from attnprof.harness.runner import RunConfig, resolve_device
    from attnprof.harness.runner import run as run_variants
    from attnprof.report.notebook import Result

    targets = (target_variant(as_target(target, inputs)),) if target is not None else ()  # fails before any work
    names = _variant_names(variants, bool(targets))
    for name, value, least in (("repeats", repeats, 1), ("warmup", warmup, 0), ("rotate_inputs", rotate_inputs, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise UserError(f"{name} must be a whole number >= {least}, got {value!r}")
    device = resolve_device(device)
    problem, _ = default_problem(device, batch=batch, heads=heads, seq=seq, head_dim=head_dim, dtype=dtype,
                                 mode=mode, kv_heads=kv_heads, mask=mask, dense_mask=dense_mask or None, q_len=q_len)
    region = region or (defaults.STEP_REGION if problem.mode == "train" else defaults.REGION)
    config = RunConfig(problem=problem, variants=names, device=device, out=Path(out), kernel=kernel,
                       compile=compile, repeats=repeats, graph=graph, targets=targets, warmup=warmup,
                       schedule=tuple(schedule), region=region, rotate_inputs=rotate_inputs, threads=threads)
    results, run_dir = run_variants(config, listener)
    if ncu:
        from attnprof.files import write_json_atomic
        from attnprof.harness.ncu import add_ncu

        add_ncu(results, config)
        write_json_atomic(run_dir / "results.json", results)
    return Result({**results, "run_dir": str(run_dir)})


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


def analyze(path: str | Path, region: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> dict:
    """Analyze a torch.profiler trace; returns the `attnprof.analysis/1` dict."""
    from attnprof.pipeline import analyze_path
    from attnprof.report.notebook import Result

    return Result(analyze_path(path, region, max_bytes))


def analyze_step(path: str | Path, region: str | None = None, name: str = "step", history: bool = True,
                 db: str | Path | None = None, attn_implementation: str | None = None,
                 environment: dict | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> dict:
    """Analyze one trace of a training step, as the profiler handler does for each trace it writes: the
    `attnprof.analysis/1` dict (its `model_step` holds attention per layer and phase) plus `line`, the one
    line the handler logs, `advice`, what to change (`attn_implementation`: what transformers was told to
    run), and `history_run`, the run's id in the history when recorded (`history`; only rank 0 of a
    distributed job records: None elsewhere) with `environment` (default: this process's)."""
    from attnprof.history import record, recording_rank
    from attnprof.history.records import from_trace
    from attnprof.pipeline import analyze_path
    from attnprof.report.model_step import advice_line, step_line
    from attnprof.report.notebook import Result

    d = analyze_path(path, region, max_bytes)
    run_id = None
    if history and recording_rank():  # the environment is collected only where it is recorded
        run_id = record(from_trace(d, name, f"attnprof.on_trace_ready ({name})", environment or run_environment()), db)
    return Result({**d, "line": step_line(d), "advice": advice_line(d, attn_implementation), "history_run": run_id})


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
    from attnprof.fix.target import as_target
    from attnprof.harness.runner import resolve_device
    from attnprof.report.notebook import Result

    loaded = as_target(target, inputs)  # a bad target fails first, before torch looks for a device
    device = resolve_device(device)
    return Result(lint_target(loaded.to(device), device, grad))
