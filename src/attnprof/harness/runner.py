"""Run variants: measure first (no profiler has run yet), then profile each with the article's
harness, write a Chrome trace, a key_averages table and results.json after every variant.

What is called, timed and profiled is the problem's unit: a forward, a decode call, or (--mode train) a
training step, the forward and its backward (`training_step`), timed whole as a forward is.

One variant failing (out of memory, unsupported backend, compile error) is recorded with its
reason and the run goes on.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from attnprof import variants as registry
from attnprof.contracts import RESULTS, RunResult
from attnprof.files import new_run_dir, write_atomic, write_json_atomic
from attnprof.harness.failures import Failure, classify
from attnprof.harness.measure import (
    RotatingCall,
    Timing,
    load_average,
    note_pin_overhead,
    time_cpu,
    time_cuda,
    torch_threads,
)
from attnprof.harness.roofline import add_roofline
from attnprof.harness.steps import training_step
from attnprof.options import MIN_TIME_S, PROBLEM, REGION, STEP_REGION, RunOptions
from attnprof.problem import Problem, make_inputs, reference_output
from attnprof.variants.base import BuildOptions, Variant, VariantUnavailable

Listener = Callable[[str, dict], None]  # (event, variant record) -> None; the terminal draws it


@dataclass(frozen=True)
class RunConfig:
    """A run's options with what they resolve to: the problem, the variants by name, the device."""

    problem: Problem
    variants: tuple[str, ...]
    device: str = "cuda"  # resolved: cuda | cpu
    options: RunOptions = field(default_factory=RunOptions)
    targets: tuple[Variant, ...] = ()  # the user's code (`run --target`): run after the variants, unchecked
    profile: bool = True  # phase 2; a sweep may skip it
    check: bool = True
    min_time_s: float = MIN_TIME_S  # timed work per measurement, at least

    @property
    def region(self) -> str:
        """The record_function name around each call: the option, else by what is called."""
        return self.options.region or (STEP_REGION if self.problem.mode == "train" else REGION)


@dataclass
class Prepared:
    """A variant ready to call: its forward bound to inputs in the layout it expects."""

    record: dict
    call: Callable[[], object] | None = field(default=None, repr=False)


def resolve_device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA GPU is visible to torch here")
    if name not in ("cuda", "cpu"):
        raise ValueError(f"unknown device {name!r}; choose auto, cuda or cpu")
    return name


def device_info(device: str) -> dict:
    import torch

    info = {"type": device, "torch": torch.__version__}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        info |= {"name": props.name, "capability": f"{props.major}.{props.minor}",
                 "sms": props.multi_processor_count, "memory_bytes": props.total_memory,
                 "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
    else:
        import platform

        info |= {"name": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
                 "native_bf16": native_bf16()}
    return info


def native_bf16() -> bool | None:
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX). Without it torch runs a bf16 matmul as
    conversions around an fp32 one, so a bf16 forward counts more aten ops (naive: 79, not 45, at B1 H2 S64
    D32 with ONEDNN_MAX_CPU_ISA=AVX2); None where torch cannot say."""
    import torch

    probes = [getattr(torch.cpu, n, None) for n in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    known = [bool(p()) for p in probes if p is not None]
    return any(known) if known else None


def run(config: RunConfig, listener: Listener | None = None) -> tuple[dict, Path]:
    """Run every variant in `config`; returns the results and the run folder. A CPU run measures and
    profiles with `config.options.threads` intra-op threads, recorded in the device info."""
    with torch_threads(config.options.threads if config.device == "cpu" else None):
        return _run(config, listener)


def _run(config: RunConfig, listener: Listener | None) -> tuple[dict, Path]:
    import torch

    notify = listener or (lambda event, record: None)
    run_dir = new_run_dir(config.options.out, config.problem.tag)
    results = RunResult(device=device_info(config.device), problem=config.problem.as_dict(),
                        config=_config_dict(config)).to_payload()
    write_json_atomic(run_dir / RESULTS, results)
    names = [registry.label(n, config.options.compile) for n in (*config.variants, *(t.name for t in config.targets))]
    notify("run_dir", {"path": str(run_dir), "device": results["device"], "problem": results["problem"],
                       "variants": names})
    with torch.no_grad():
        inputs, reference, no_inputs = _inputs(config)  # q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D]
        prepared, loads = [], []
        names = (*config.variants, *(t.name for t in config.targets))
        for name in (registry.label(n, config.options.compile) for n in names):  # phase 1: check, time
            notify("start", {"name": name})
            item = Prepared(_empty_record(name) | no_inputs) if no_inputs else _measure(name, config, inputs, reference)
            prepared.append(item)
            results["variants"].append(item.record)
            loads.append(load_average())
            results["load"] = {"max_load_average": max(filter(None, loads), default=None), "cores": os.cpu_count()}
            write_json_atomic(run_dir / RESULTS, results)
            notify("measured", item.record)
        add_roofline(results)  # measures the device's ceilings once, then reads them from a cache
        write_json_atomic(run_dir / RESULTS, results)
        for item in prepared:  # phase 2: profile what ran
            if item.call is not None and config.profile:
                _profile_into(item, config, run_dir, results.get("ceilings"))
                write_json_atomic(run_dir / RESULTS, results)
            item.call = None
            notify("done", item.record)
        note_pin_overhead(results["variants"])
        write_json_atomic(run_dir / RESULTS, results)
    return results, run_dir


def _inputs(config: RunConfig) -> tuple[tuple | None, object, dict | None]:
    """(inputs, reference output, None), or (None, None, the oom record) when the inputs do not fit:
    then every variant is that out-of-memory, with the size asked for, and the run goes on."""
    try:
        inputs = make_inputs(config.problem, config.device)
        return inputs, reference_output(*inputs, problem=config.problem) if config.check else None, None
    except (RuntimeError, MemoryError) as e:
        failed = classify(e, [])
        if failed["status"] != "oom":
            raise
        return None, None, failed


def _config_dict(config: RunConfig) -> dict:
    """The options the run was given (the problem's are in results["problem"]) and what they resolved to."""
    given = {k: v for k, v in asdict(config.options).items() if k not in PROBLEM}
    return {**given, "variants": config.variants, "device": config.device, "out": str(config.options.out),
            "region": config.region, "check": config.check, "targets": [t.description for t in config.targets],
            "profile": config.profile, "min_time_s": config.min_time_s}


def _measure(name: str, config: RunConfig, inputs, reference) -> Prepared:
    record = _empty_record(name)
    try:
        base = name.removesuffix(registry.COMPILE_SUFFIX)
        variant = next((t for t in config.targets if t.name == base), None) or registry.get(name)
        record |= {"family": variant.family, "layout": variant.layout}
        call, out, first_s = _prepare(variant, config, inputs)
        record["first_call_s"] = round(first_s, 3)  # never in the timings
        record["first_call_includes_compile"] = config.options.compile or variant.compiled
        if reference is not None and variant.family != "target":  # a target's output is its own
            record["max_abs_error"] = _max_abs_error(out, reference, variant.layout)
        del out
        timing = _time(call, config)
        record.update(_timing_fields(timing))
        return Prepared(record, call)
    except Failure as f:
        record |= {"status": f.status, "reason": f.reason}
    except Exception as e:  # noqa: BLE001 - isolate the failure, keep the run going
        record |= classify(e, [])
    _free_cuda_cache(config.device)
    return Prepared(record)


def _empty_record(name: str) -> dict:
    return {"name": name, "status": "ok", "reason": None, "per_forward": None, "unit": None, "phases": None,
            "device_us": None, "latency_us": None, "host_us": None, "peak_memory_bytes": None,
            "max_abs_error": None, "trace": None, "table": None}


def _prepare(variant: Variant, config: RunConfig, inputs) -> tuple[Callable[[], object], object, float]:
    """Build, lay out inputs, make the first call (compile happens here) and warm up."""
    reason = registry.why_not(variant, config.problem, config.device, config.options.kernel)
    if reason:
        raise Failure("unsupported", reason)
    if config.options.compile and not variant.compiled:
        variant = variant.with_compile()
    args = variant_args(variant, config.problem, inputs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            forward = variant.build(config.problem, config.device, BuildOptions(kernel=config.options.kernel))
            if config.problem.mode == "train":
                forward = (variant.train_step or training_step)(forward, args)
            t0 = time.perf_counter()
            out = forward(*args)
            _sync(config.device)
            first_s = time.perf_counter() - t0
        except VariantUnavailable as e:
            raise Failure("unsupported", str(e)) from None
        except Exception as e:  # noqa: BLE001
            raise Failure(**classify(e, caught)) from None
    call = RotatingCall(forward, args, config.options.rotate_inputs)  # bound once: timing and profiling call the same
    for _ in range(config.options.warmup):
        call()
    _sync(config.device)
    return call, out, first_s


def variant_args(variant: Variant, problem: Problem, inputs: tuple) -> tuple:
    """The run's inputs as `variant` takes them (its layout), for every pass that calls it (timing, profiling,
    the ncu child): a training step's are leaves of their own over the same memory."""
    args = tuple(t.transpose(1, 2).contiguous() for t in inputs) if variant.layout == "BSHD" else inputs
    if problem.mode == "train":
        # what one variant's steps keep alive (a kernel that holds an output holds its graph, down to the leaves'
        # AccumulateGrad nodes, made on that call's stream) must not reach the next variant's steps, whose CUDA
        # graph capture such nodes refuse (docs/lab/kernel.md, the train run's 1.17 ms)
        args = tuple(t.detach() for t in args)
    return args


def _max_abs_error(out, reference, layout: str) -> float:
    out = out.transpose(1, 2) if layout == "BSHD" else out  # back to [B, H, S, D]
    return float((out.double() - reference).abs().max())


def _time(call: Callable[[], object], config: RunConfig) -> Timing:
    if config.device == "cuda":
        return time_cuda(call, config.options.repeats, use_graph=config.options.graph, min_time_s=config.min_time_s)
    return time_cpu(call, config.options.repeats, min_time_s=config.min_time_s)


def _timing_fields(t: Timing) -> dict:
    refused = {"graph_refused": t.graph_refused} if t.graph_refused else {}  # why it ran back to back
    return {"device_us": {**t.device_us.as_dict(), "method": t.device_method, **refused},
            "latency_us": t.latency_us.as_dict(), "host_us": t.host_us,
            "peak_memory_bytes": t.peak_memory_bytes, "cpu_bound": t.cpu_bound, "threads": t.threads}


def _profile_into(item: Prepared, config: RunConfig, run_dir: Path, ceilings: dict | None) -> None:
    from attnprof.harness.memory_view import memory_view
    from attnprof.harness.profiling import profile_call
    from attnprof.harness.rule_inputs import needs_shapes, run_facts
    from attnprof.pipeline.one_trace import summarize_trace

    record = item.record
    stem = f"{config.problem.tag}_{record['name']}"
    trace_path, table_path = run_dir / f"{stem}.json.gz", run_dir / f"{stem}.txt"
    try:
        table = profile_call(item.call, trace_path, config.device, config.region, config.options.schedule,
                             record_shapes=needs_shapes(config.problem))
        write_atomic(table_path, table)
        record |= {"trace": trace_path.name, "table": table_path.name}
        # the findings are decided once, from the trace and what the run knows (timing, ceilings, mask)
        record.update(summarize_trace(trace_path, config.region, run_facts(config.problem, ceilings, record)))
        record["memory"] = memory_view(item.call, config.device)  # one more call, apart: its peak, what holds it
    except OSError:
        raise  # the trace or table could not be written (a full disk): not a profiling failure to record
    except Exception as e:  # noqa: BLE001 - the measurements stand even if profiling fails
        record["profile_error"] = f"{type(e).__name__}: {' '.join(str(e).split())}"[:300]


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _free_cuda_cache(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()
