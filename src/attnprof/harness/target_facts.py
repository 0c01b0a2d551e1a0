"""What a run states about the user's own module (`run --target`): the problem it ran (its inputs' shapes and
dtypes, its parameters and projections: not the run's B/H/S/D, which it ignores) and its output's error
against a float64 run of itself (the same weights and inputs, in float64), the check the variants get
against the float64 reference. It is never compared with the variants: its problem is its own."""

from __future__ import annotations

import copy
from typing import Any

PROJECTIONS_LISTED = 6  # Linear layers named in the problem line; the rest are counted


def own_problem(target: Any) -> dict:
    """{"inputs": [{"name", "shape", "dtype"}], "parameters", "parameter_dtypes", "projections": ["q_proj
    512->512", ...], "projections_not_listed"} of a fix.target.Target."""
    items = target.inputs.items() if isinstance(target.inputs, dict) else enumerate(target.inputs)
    inputs = [{"name": str(k) if isinstance(k, str) else f"arg{k}", "shape": list(v.shape),
               "dtype": str(v.dtype).removeprefix("torch.")} for k, v in items if hasattr(v, "shape")]
    params = list(target.fn.parameters()) if hasattr(target.fn, "parameters") else []
    linear = [(name, m) for name, m in target.fn.named_modules() if type(m).__name__ == "Linear"] \
        if hasattr(target.fn, "named_modules") else []
    return {"inputs": inputs, "parameters": sum(p.numel() for p in params),
            "parameter_dtypes": sorted({str(p.dtype).removeprefix("torch.") for p in params}),
            "projections": [f"{name} {m.in_features}->{m.out_features}" for name, m in linear[:PROJECTIONS_LISTED]],
            "projections_not_listed": max(len(linear) - PROJECTIONS_LISTED, 0)}


def float64_error(target: Any, device: str) -> dict:
    """{"max_abs_error": the largest difference between the module's first output tensor and that of a float64
    copy of it on float64 inputs, "against": what it was checked against} or {"max_abs_error": None, "why"}."""
    import torch

    try:
        with torch.no_grad():
            moved = target.to(device)
            torch.manual_seed(0)  # dropout draws the same numbers in both runs
            out = _first_tensor(moved())
            wide = copy.deepcopy(moved)
            fn = wide.fn.double() if hasattr(wide.fn, "double") else wide.fn
            args = _double(wide.inputs)
            torch.manual_seed(0)
            ref = _first_tensor(fn(**args) if isinstance(args, dict) else fn(*args))
    except Exception as e:  # noqa: BLE001 - a module that cannot run in float64 is stated, not a failed run
        said = " ".join(str(e).split())[:120]
        return {"max_abs_error": None, "why": f"no float64 run of it ({type(e).__name__}: {said})"}
    if out is None or ref is None or out.shape != ref.shape:
        return {"max_abs_error": None, "why": "its output has no tensor to compare with a float64 run of it"}
    return {"max_abs_error": float((out.double() - ref).abs().max()) if out.numel() else 0.0,
            "against": "a float64 run of itself (same weights and inputs)"}


def _first_tensor(out: Any) -> Any:
    import torch

    if isinstance(out, torch.Tensor):
        return out
    for item in (out.values() if isinstance(out, dict) else out if isinstance(out, (list, tuple)) else ()):
        if isinstance(item, torch.Tensor):
            return item
    logits = getattr(out, "logits", None) if not isinstance(out, (dict, list, tuple)) else None
    return logits if isinstance(logits, torch.Tensor) else None


def _double(inputs: tuple | dict) -> tuple | dict:
    import torch

    def wide(x: Any) -> Any:
        return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x

    return {k: wide(v) for k, v in inputs.items()} if isinstance(inputs, dict) else tuple(map(wide, inputs))


def add_target_facts(results: dict, targets: list, device: str) -> None:
    """Each target's record of `results` gets its own problem and its error against a float64 run of itself."""
    by_name = {t.name: t for t in targets}
    for record in results["variants"]:
        target = by_name.get(record["name"].split("+")[0])
        if record.get("family") != "target" or target is None:
            continue
        record["own_problem"] = own_problem(target)
        if record["status"] == "ok":
            checked = float64_error(target, device)
            record["max_abs_error"] = checked["max_abs_error"]
            record["error_against"] = checked.get("against") or checked["why"]
