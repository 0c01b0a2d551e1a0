"""A rewrite is a proof or a refusal: it is checked against the original before anything is written,
and what was checked is the verdict.

Both sources are imported as separate modules (a copy: the user's file is never executed rewritten
before it passes). Equivalence is decided in float64 (fix.float64): both modules deep-copied and cast
to double with the same weights, run on the calls seen and on the inputs a factory never makes
(fix.cases: other values, other lengths, a shorter query, fully masked rows, empty samples, padded
batches), in the other modes (fix.modes: train mode, MC dropout, its flags flipped), with and without autograd;
outputs, every input's and parameter's gradient, and what each call left in its inputs, buffers and
parameters, compared at a tolerance only a different summation order passes. Then the autograd the
original supports beyond first order (fix.autodiff), and the rounding in the model's own dtype
(fix.quality). A variation the original itself rejects is not a call the module takes, and is skipped.
"""

from __future__ import annotations

import copy
from typing import Any

from attnprof.errors import UserError
from attnprof.fix import autodiff, modes, quality
from attnprof.fix.cases import CALLS_SEEN, cases, flag_cases, masked_cases
from attnprof.fix.float64 import RTOL, in_float64, relative_difference, tolerance, widened, widened_module
from attnprof.fix.runs import run, shortened
from attnprof.fix.target import before_and_after, source_file, tensors_in

FIRST_ORDER = "first-order autograd"


class RewriteDiffers(UserError):
    """The rewritten module computes something else, or does not run: nothing is written."""


def check(spec: str, sources: dict[str, tuple[str, str]], device: str = "cpu", strict: bool = False) -> dict:
    """The verdict on the rewrite (`sources`, {file: (old, new)}) against the original; raises
    RewriteDiffers on the first thing that differs, or (with `strict`) on autograd the rewrite loses."""
    if not sources:
        return {}
    file = str(source_file(spec))
    if set(sources) != {file}:
        others = ", ".join(sorted(set(sources) - {file}))
        raise RewriteDiffers(f"the rewrite is in {others}, not the target's own file: it cannot be checked in "
                             "a copy, so nothing is written (make a target in that file)")
    old, new = sources[file]
    before, after = before_and_after(spec, old, new, device)
    return check_modules(before.fn, after.fn, before.inputs, strict)


def check_modules(original: Any, rewritten: Any, inputs, strict: bool = False) -> dict:
    """The verdict on two modules of the same weights, as `check` (grad is enabled for the check itself:
    it runs under torch.no_grad() too)."""
    import torch

    with torch.enable_grad():
        tally = Tally()
        wide = [_deterministic(widened_module(m)) for m in (original, rewritten)]
        for name, case in [*cases(inputs), *masked_cases(inputs), *flag_cases(inputs)]:
            if all([_compared(*wide, name, widened(case), grad, tally) for grad in (False, True)]):
                tally.inputs.append(name)
        if not tally.outputs:
            raise RewriteDiffers("the forward returns no tensor: a check that compared nothing proves nothing")
        for mode, setter in [*modes.modes(original), *modes.flags(original)]:
            _in_mode(*wide, mode, setter, widened(inputs), tally)
        autograd = _autograd(*wide, widened(inputs), tally)
        sixteen = _rounding(original, rewritten, inputs, tally.reference)
    if strict and autograd["lost"]:
        raise RewriteDiffers(f"--strict: the rewrite loses {'; '.join(autograd['lost'])}")
    return {"float64": {"max_relative_difference": tally.worst, "tensors": tally.tensors,
                        "gradients": tally.gradients, "rtol": RTOL,
                        "absorbed": {"max_relative_difference": tally.worst_absorbed, "rtol": tally.rtol_absorbed}},
            "quality": sixteen, "inputs": tally.inputs, "autograd": autograd, "notes": tally.notes}


class Tally:
    """What the float64 comparisons saw: the worst relative difference, how many tensors, which inputs."""

    def __init__(self) -> None:
        self.worst, self.tensors, self.gradients, self.outputs = 0.0, 0, 0, 0
        self.rtol = RTOL  # the run's: float64.tolerance where the forward made a value that absorbs scores
        self.worst_absorbed, self.rtol_absorbed, self.rtol_calls_seen = 0.0, RTOL, RTOL
        self.inputs: list[str] = []
        self.notes: list[str] = []
        self.reference: list[tuple[str, Any]] = []  # the original's float64 result on the calls seen

    def note(self, line: str) -> None:
        if line not in self.notes:
            self.notes.append(line)


def _deterministic(module: Any) -> Any:
    """Eval mode where a dropout would draw random masks (the modes with dropout are tried apart)."""
    if modes.has_dropout(module):
        module.eval()
    return module


def _compared(before: Any, after: Any, name: str, inputs, grad: bool, tally: Tally, seed: int = 0) -> bool:
    """True when both agree in float64 on this case; False when the original rejects it; raises when
    they differ or the rewrite raises."""
    absorbing: list[float] = []
    try:
        with in_float64(absorbing):
            want = run(before, inputs, grad, seed)
    except Exception as e:  # noqa: BLE001 - the original rejects this variation: not a call it takes
        if name == CALLS_SEEN and not grad:
            raise RewriteDiffers(f"the original forward raises on its own inputs in float64 ({type(e).__name__}: "
                                 f"{shortened(str(e))}): equivalence cannot be decided") from None
        return False
    try:
        with in_float64():
            got = run(after, inputs, grad, seed)
    except Exception as e:  # noqa: BLE001 - the rewritten forward raising is a failed check, in one line
        raise RewriteDiffers(f"the rewritten forward raises on {name}{' with grads' if grad else ''}: "
                             f"{type(e).__name__}: {shortened(str(e))}") from None
    tally.rtol = tolerance(absorbing)
    same(want, got, name, tally)
    if name == CALLS_SEEN and grad:
        tally.reference, tally.rtol_calls_seen = want, tally.rtol
    return True


def same(want: list, got: list, name: str, tally: Tally) -> None:
    """Raises RewriteDiffers unless two float64 results agree tensor by tensor. A NaN of the original
    where the rewrite is finite (-inf over a fully masked row) is stated, not held against it."""
    import torch

    if len(want) != len(got):
        raise RewriteDiffers(f"the rewrite returns {len(got)} tensors on {name}, the original {len(want)}")
    for (label, a), (_, b) in zip(want, got, strict=True):
        if a.shape != b.shape or a.dtype != b.dtype:
            raise RewriteDiffers(f"the rewrite's {label} on {name} is {b.dtype} {list(b.shape)}, the original's "
                                 f"{a.dtype} {list(a.shape)}")
        if a.is_floating_point() and bool(torch.isnan(a).any()) and not bool(torch.isnan(b).any()):
            if label.startswith("gradient"):
                continue  # a NaN of the original's reaches every gradient: nothing there to compare
            tally.note(_nan_note(a, b))
            b = torch.where(torch.isnan(a), a, b)
        difference = relative_difference(a, b) if a.is_floating_point() else float(not torch.equal(a, b))
        if difference > tally.rtol:
            raise RewriteDiffers(f"the rewrite's {label} differs from the original's on {name} in float64 "
                                 f"(max relative difference {difference:.3g})")
        if tally.rtol == RTOL:
            tally.worst = max(tally.worst, difference)
        else:
            tally.worst_absorbed = max(tally.worst_absorbed, difference)
            tally.rtol_absorbed = max(tally.rtol_absorbed, tally.rtol)
        tally.tensors += 1
        tally.gradients += label.startswith(("gradient", "second-order", "jvp"))
        tally.outputs += label.startswith("output")


def _nan_note(a, b) -> str:
    import torch

    after = "0" if bool((b[torch.isnan(a)] == 0).all()) else "finite values"
    return f"a fully masked row (every score -inf): NaN before, {after} after"


def _in_mode(before: Any, after: Any, mode: str, setter, inputs, tally: Tally) -> None:
    """The calls seen in a train or MC-dropout mode: the same in float64 from one seed; where the draws
    differ, dropout applied in both or in neither."""
    b, a = modes.moded(before, setter), modes.moded(after, setter)
    draws = _draws(b, inputs, mode, "original"), _draws(a, inputs, mode, "rewrite")
    if draws[0] is None:
        return  # the original does not run in this mode
    if mode == modes.TRAIN_P0 and draws[0]:
        tally.note(f"{mode} not compared: the original still draws random numbers (a rate attnprof could not "
                   "set to 0)")
        return
    try:
        if not _compared(b, a, mode, inputs, True, tally):
            return  # the original rejects the calls seen with grads in this mode
    except RewriteDiffers:
        if draws[0] != draws[1]:
            raise RewriteDiffers(f"in {mode} the original {'drops' if draws[0] else 'does not drop'}, the "
                                 f"rewrite {'does' if draws[1] else 'does not'}") from None
        if not draws[0]:
            raise
        tally.note(f"{mode}: dropout applied in both (their random draws differ: not compared by value)")
    tally.inputs.append(mode)


def _draws(module: Any, inputs, mode: str, side: str) -> bool | None:
    """Whether `module` gives other outputs from another seed (draws random numbers); None where the
    original raises; the rewrite raising is RewriteDiffers."""
    import torch

    try:
        with in_float64():
            first, second = (run(module, inputs, False, seed) for seed in (0, 1))
    except Exception as e:  # noqa: BLE001
        if side == "rewrite":
            raise RewriteDiffers(f"the rewritten forward raises in {mode}: {type(e).__name__}: "
                                 f"{shortened(str(e))}") from None
        return None
    return not all(torch.equal(x.nan_to_num(), y.nan_to_num()) for (_, x), (_, y) in zip(first, second, strict=True))


def _autograd(before: Any, after: Any, inputs, tally: Tally) -> dict:
    """{"preserved", "lost", "unsupported"}: the autograd beyond first order the original supports and the
    rewrite keeps (values compared in float64), or loses (with torch's reason)."""
    found = {"preserved": [FIRST_ORDER], "lost": [], "unsupported": []}
    tally.rtol = tally.rtol_calls_seen  # on the calls seen
    for capability, compute in autodiff.CAPABILITIES.items():
        try:
            with in_float64():
                want = compute(before, inputs, tensors_in)
        except Exception:  # noqa: BLE001 - the original does not support it: nothing to keep
            found["unsupported"].append(capability)
            continue
        try:
            with in_float64():
                got = compute(after, inputs, tensors_in)
        except Exception as e:  # noqa: BLE001 - what the rewrite takes away, listed
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            found["lost"].append(f"{capability} ({shortened(why, 120)})")
            continue
        same(want, got, capability, tally)
        found["preserved"].append(capability)
    return found


def _rounding(original: Any, rewritten: Any, inputs, reference: list) -> dict:
    """The calls seen in the model's own dtype: the rewrite returns what the original returns (shapes and
    dtypes: float64 cannot see a dtype), and in 16-bit fix.quality's verdict against the float64 result."""
    runs = []
    for side, module in (("original", original), ("rewrite", rewritten)):
        try:
            got = run(_deterministic(copy.deepcopy(module)), inputs, True)
        except Exception as e:  # noqa: BLE001
            raise RewriteDiffers(f"the {side}'s forward raises in its own dtype on {CALLS_SEEN}: "
                                 f"{type(e).__name__}: {shortened(str(e))}") from None
        runs.append([o for o in got if o[0].startswith(("output", "gradient"))])
    if len(runs[0]) != len(runs[1]):
        raise RewriteDiffers(f"in the model's own dtype the rewrite returns {len(runs[1])} outputs and gradients, "
                             f"the original {len(runs[0])}")
    for (label, a), (_, b) in zip(*runs, strict=True):
        if (a.shape, a.dtype) != (b.shape, b.dtype):
            raise RewriteDiffers(f"in the model's own dtype the rewrite's {label} is {b.dtype} {list(b.shape)}, "
                                 f"the original's {a.dtype} {list(a.shape)}")
    judged = [o for o in reference if o[0].startswith(("output", "gradient"))]
    if len(judged) != len(runs[0]):
        return {}  # no float64 result with grads on the calls seen to hold them against
    try:
        return quality.judged(*runs, judged)
    except quality.WorseRounding as e:
        raise RewriteDiffers(str(e)) from None
