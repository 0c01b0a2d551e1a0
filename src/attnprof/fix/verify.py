"""`attnprof patch --verify`: the patched source against the original, same weights, same inputs.

The patched file is imported as a separate module, so before and after run side by side in one
process. Outputs must match (tolerance by dtype, torch.testing's defaults); then both are timed
(before any profiler runs: a profiler leaves host overhead behind) and profiled, and the
difference per forward is what the patch bought: GPU activities on a GPU, aten ops and copies on
the CPU, the activities removed or added by name (diff.py), and the latency change.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from attnprof.analysis.attribution import Analysis
from attnprof.errors import UserError
from attnprof.fix import quality
from attnprof.fix.differential import RewriteDiffers
from attnprof.fix.lint import profile_target
from attnprof.fix.target import Target, before_and_after, source_file, tensors_in

REPEATS = 20


def verify(spec: str, sources: dict[str, tuple[str, str]], device: str, grad: bool = False) -> dict:
    """Compare the target before and after `sources` ({file: (old, new)}, the target's own file)."""
    file = str(source_file(spec))
    if not sources:
        raise UserError("--verify: no safe rewrite to verify")
    if set(sources) != {file}:
        raise UserError(f"--verify imports only the target's own file {file}; the rewrites "
                         f"are in {', '.join(sorted(sources))}")
    old, new = sources[file]  # the old text, not the file: after --write the file holds the new one
    before, after = before_and_after(spec, old, new, device)
    return compare(before, after, device, grad)


def checked_first(run: Callable[[], dict]) -> dict:
    """--verify's result, before anything is written: outputs that differ, or a rewritten forward that
    raises, become one line (exit 2) and the user's file stays as it was."""
    try:
        result = run()
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 - the rewritten forward raising is a failed verification
        raise RewriteDiffers(f"--verify: the rewritten forward raises ({type(e).__name__}: "
                             f"{' '.join(str(e).split())[:160]}): nothing written") from None
    if not result["outputs"]["match"]:
        raise RewriteDiffers(f"--verify: outputs {result['outputs']['detail']}: nothing written")
    return result


def compare(before: Target, after: Target, device: str, grad: bool = False) -> dict:
    """Two builds of one target (same weights, same inputs): outputs, device time outside the profiler
    (median and spread), peak memory, then the profiles' difference and the SDPA backend each ran."""
    import torch

    from attnprof.analysis.noise import compare as compare_spreads
    from attnprof.findings.sdpa_dispatch import sdpa_backend

    with torch.set_grad_enabled(grad):
        match = judge(before, after)
        timings = [_timing(t, device) for t in (before, after)]
    profiles = [profile_target(t, device, grad, marks=False) for t in (before, after)]
    latency, spreads = [t.device_us.median for t in timings], [t.device_us.as_dict() for t in timings]
    return {"target": before.spec, "device": device, "outputs": match, **delta(*profiles),
            "latency_us": {"before": latency[0], "after": latency[1], "change_pct": _pct(*latency),
                           "change": compare_spreads(*spreads),  # "no change" inside both spreads
                           "spread": spreads, "method": timings[0].device_method,
                           "one_forward": [t.latency_us.as_dict() for t in timings]},
            "peak_memory_bytes": [t.peak_memory_bytes for t in timings],
            "sdpa_backend": [sdpa_backend(p) for p in profiles]}


def _output(target: Target) -> list:
    import torch

    torch.manual_seed(0)  # dropout or sampling inside the forward draws the same numbers twice
    return tensors_in(target())


def judge(before: Target, after: Target) -> dict:
    """The one verdict on the outputs, for a rewrite and for a library's switch alike: the same within
    torch.testing's tolerance for the dtype; for 16-bit outputs that are not, the same when the rewrite's
    error against a float64 run of the original is within fix.quality's bar (twice the original's, plus
    two units of the format: flash-attention's own test); else different. Worded to be read alone."""
    old, new = _output(before), _output(after)
    if len(old) != len(new):
        return {"match": False, "detail": f"different ({len(old)} output tensors before, {len(new)} after)"}
    count = f"{len(old)} output tensor(s)"
    shapes = [(a.shape, a.dtype) == (b.shape, b.dtype) for a, b in zip(old, new, strict=True)]
    if not all(shapes):
        return {"match": False, "detail": f"different (the shapes or dtypes of the {count} changed)"}
    worst = max((float((b.double() - a.double()).abs().max()) for a, b in zip(old, new, strict=True)
                 if a.numel()), default=0.0)
    if _close(old, new):
        return {"match": True, "detail": f"the same ({count}, max abs difference {worst:.3g})"}
    sixteen = [a.dtype for a in old if quality.sixteen_bit(a.dtype)]
    if not sixteen:
        return {"match": False, "detail": f"different (max abs difference {worst:.3g} over {count}, beyond "
                                          "torch.testing's tolerance for the dtype)"}
    try:
        reference = _float64_outputs(before)
    except Exception as e:  # noqa: BLE001 - the original's own failure in float64, not the rewrite's
        return {"match": False, "detail": f"different (max abs difference {worst:.3g}; the original does not run "
                                          f"in float64 to judge the rounding: {type(e).__name__})"}
    errors = [max(quality.error(t, w) for t, w in zip(got, reference, strict=True)) for got in (old, new)]
    within = all(quality.error(b, w) <= quality.bar(quality.error(a, w), w, a.dtype, "output")
                 for a, b, w in zip(old, new, reference, strict=True))
    rounding = f"against a float64 run of the original, max abs error {errors[0]:.3g} before, {errors[1]:.3g} after"
    if within:
        return {"match": True, "detail": f"the same within {str(sixteen[0]).removeprefix('torch.')} rounding "
                                         f"({rounding})"}
    return {"match": False, "detail": f"different (max abs difference {worst:.3g}; {rounding})"}


def _close(old: list, new: list) -> bool:
    import torch

    try:
        for a, b in zip(old, new, strict=True):
            torch.testing.assert_close(b, a)  # rtol/atol chosen by dtype
    except AssertionError:
        return False
    return True


def _float64_outputs(before: Target) -> list:
    """The outputs of a float64 copy of the original (fix.float64), the yardstick for both."""
    import torch

    from attnprof.fix.float64 import in_float64, widened, widened_module

    reference, inputs = widened_module(before.fn), widened(before.inputs)
    torch.manual_seed(0)
    with in_float64():
        return tensors_in(reference(**inputs) if isinstance(inputs, dict) else reference(*inputs))


def _timing(target: Target, device: str):
    from attnprof.harness.measure import time_cpu, time_cuda

    for _ in range(3):
        target()
    # device time from CUDA graph replay where the forward can be captured (back to back where not):
    # a small forward issued from Python is host-bound, and back-to-back time would measure the host
    return time_cuda(target, REPEATS) if device == "cuda" else time_cpu(target, REPEATS)


def delta(before: Analysis, after: Analysis) -> dict:
    """diff.py's comparison (GPU activities by name, per-forward facts, findings gone or new); on the
    CPU, where there are no GPU activities, the aten ops removed or added by name as well."""
    from attnprof.pipeline.one_trace import diff

    out = {"diff": diff(before, after)}
    if not before.has_gpu:
        old, new = _aten_names(before), _aten_names(after)
        out |= {"aten_removed": dict(old - new), "aten_added": dict(new - old)}
    return out


def _aten_names(a: Analysis) -> Counter:
    """Per-forward count of each aten op."""
    total = Counter(op.name for fwd in a.forwards for op in fwd.cpu_ops if op.name.startswith("aten::"))
    n = max(len(a.forwards), 1)
    return Counter({k: round(v / n, 2) for k, v in total.items()})


def _pct(old: float, new: float) -> float | None:
    return round(100.0 * (new - old) / old, 1) if old else None
