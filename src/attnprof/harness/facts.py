"""What a run knows that a bare trace does not, filled into the findings that ask for it: the device's
measured copy ceiling (memory-bound: the share of it a call reached, and the time above the floor) and
the mask itself (dense-mask: the share of score tiles it empties, which a kernel given is_causal or a
block mask would skip)."""

from __future__ import annotations

from attnprof.findings import rank
from attnprof.problem import Problem
from attnprof.units import us

FAST_ENOUGH = 0.5  # a memory-bound call at half the copy ceiling or better is information, not a warning


def needs_shapes(problem: Problem) -> bool:
    """Whether the profiler must record input shapes: the findings of decode, GQA and masks read the
    attention op's tensors from them; the article's forward keeps host time undisturbed."""
    return problem.mode == "decode" or problem.groups > 1 or problem.mask != "causal" or problem.dense_mask


def add_known_facts(record: dict, problem: Problem, ceilings: dict | None) -> None:
    findings = record.get("findings") or []
    copy_tbps = (ceilings or {}).get("copy_tbps")
    for f in findings:
        if f["id"] == "memory-bound" and copy_tbps:
            _rate_against_copy(f, copy_tbps * 1e12)
        elif f["id"] == "dense-mask" and problem.dense_mask:
            _mask_share(f, problem.masked_tile_share())
    record["findings"] = rank(findings)


def _rate_against_copy(f: dict, peak: float) -> None:
    ev = f["evidence"]
    fraction = ev["achieved_bytes_per_s"] / peak
    floor_us = ev["bytes"] / peak * 1e6
    ev |= {"peak_bytes_per_s": peak, "peak_basis": "measured device copy (read + write)",
           "fraction": round(fraction, 4), "floor_us": round(floor_us, 3)}
    f["cost_us"] = round(max(ev["time_us"] - floor_us, 0.0), 3)
    f["severity"] = "info" if fraction >= FAST_ENOUGH else "warn"
    f["message"] += (f"; {fraction:.0%} of this device's measured copy bandwidth ({peak / 1e12:.3g} TB/s): "
                     f"{us(f['cost_us'])} above the {us(floor_us)} floor")


def _mask_share(f: dict, share: float) -> None:
    ev = f["evidence"]
    ev["masked_tile_share"] = round(share, 4)
    f["cost_us"] = round(ev["time_us_per_forward"] * share, 3)
    if share:
        f["severity"] = "warn"
        f["message"] += (f"; the mask empties {share:.0%} of the 128x128 score tiles, computed for nothing "
                         f"(~{us(f['cost_us'])})")
