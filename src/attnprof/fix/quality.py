"""16-bit quality, judged the way flash-attention's own tests judge a kernel: in the model's own dtype,
the rewrite's error against the float64 result at most twice the original's (outputs) and three times
(gradients), plus a few units of the format at the tensor's magnitude. A rewrite that is the same
function (decided in float64) but rounds worse than the code it replaces is refused here; one that
rounds differently (SDPA keeps the softmax in fp32, the eager chain rounds scores and probabilities)
passes, and both errors are shown."""

from __future__ import annotations

from typing import Any

from attnprof.fix.float64 import magnitude

OUTPUT_FACTOR, GRADIENT_FACTOR = 2.0, 3.0
UNITS = 2  # flash-attention's atol: twice the format's rounding at the reference's magnitude


class WorseRounding(ValueError):
    """The rewrite's 16-bit error is over the bar; the message says which tensor and by how much."""


def sixteen_bit(dtype: Any) -> bool:
    import torch

    return dtype in (torch.float16, torch.bfloat16)


def error(t: Any, reference: Any) -> float:
    """max |t - reference| where the reference is a number (a NaN of the float64 original is fix.differential's
    to state); NaN where the reference is not counts as infinitely far."""
    import torch

    if not t.numel():
        return 0.0
    a, b = t.detach().double(), reference.detach().double()
    difference = torch.where(torch.isnan(b), torch.zeros_like(a), (a - b).abs())
    return float(torch.nan_to_num(difference, nan=float("inf")).max())


def bar(original_error: float, reference: Any, dtype: Any, label: str) -> float:
    """The most a rewrite's tensor may be off the float64 result."""
    import torch

    factor = OUTPUT_FACTOR if label.startswith("output") else GRADIENT_FACTOR
    return factor * original_error + UNITS * torch.finfo(dtype).eps * magnitude(reference)


def judged(original: list[tuple[str, Any]], rewritten: list[tuple[str, Any]],
           reference: list[tuple[str, Any]]) -> dict:
    """{"dtype", "outputs": [original's error, rewrite's], "gradients": [...]} (the largest of each kind);
    raises WorseRounding at the first tensor over its bar."""
    worst = {"outputs": [0.0, 0.0], "gradients": [0.0, 0.0]}
    dtype = None
    for (label, old), (_, new), (_, want) in zip(original, rewritten, reference, strict=True):
        if not sixteen_bit(old.dtype):
            continue
        dtype = old.dtype
        errors = error(old, want), error(new, want)
        limit = bar(errors[0], want, old.dtype, label)
        if errors[1] > limit:
            raise WorseRounding(f"in {str(old.dtype).removeprefix('torch.')} the rewrite's {label} is "
                                f"{errors[1]:.3g} from the float64 result, the original's {errors[0]:.3g} "
                                f"(over the bar of {limit:.3g})")
        kind = worst["outputs" if label.startswith("output") else "gradients"]
        kind[:] = [max(kind[0], errors[0]), max(kind[1], errors[1])]
    return {"dtype": str(dtype).removeprefix("torch."), **worst} if dtype is not None else {}
