"""How far a set of timing samples can be trusted, and whether two measurements differ. No torch.

A median with a tight interquartile range can still be wrong: a machine that changed pace during
the measurement, or samples from two states (a cache warm and cold, a clock boosting or not),
give a median that describes neither. So each measurement carries a verdict, `unstable`: None, or
the first reason below that holds (the report marks the number instead of printing it as exact):
- too few: fewer than MIN_SAMPLES samples say nothing about their spread.
- bimodal: the sorted samples split at one gap into two groups of at least BIMODAL_SHARE each,
  the gap wider than GAP_SHARE of the median and wider than twice either group's IQR.
- drift: the first and second half of the samples (taken one after the other) have medians
  further apart than DRIFT_SHARE and than either half's IQR: the pace changed while measuring.
- outliers: more than OUTLIER_SHARE of the samples beyond Tukey's fences (1.5 IQR past a quartile).
- wide: IQR above WIDE_SHARE of the median (torch.utils.benchmark's Measurement warns at 10% too).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from attnprof.units import sig

MIN_SAMPLES = 5
WIDE_SHARE = 0.10
BIMODAL_SHARE = 0.15
GAP_SHARE = 0.10
DRIFT_SHARE = 0.05
OUTLIER_SHARE = 0.20
TUKEY = 1.5
# A GPU's time for one call moves up to ~0.7% between processes while one process's IQR can be 0.1%
# (H200, 20 (point, variant) pairs, docs/benchmarks.md "A sweep, twice"): smaller changes are no change.
MIN_CHANGE_SHARE = 0.01


def quartiles(samples: list[float]) -> tuple[float, float, float]:
    """(p25, median, p75), inclusive method: the same numbers for any order of the samples."""
    if len(samples) == 1:
        return samples[0], samples[0], samples[0]
    q = statistics.quantiles(samples, n=4, method="inclusive")
    return q[0], statistics.median(samples), q[2]


def iqr(samples: list[float]) -> float:
    lo, _, hi = quartiles(samples)
    return hi - lo


def is_wide(samples: list[float]) -> bool:
    """IQR above WIDE_SHARE of the median (a measuring loop goes on while this holds)."""
    lo, mid, hi = quartiles(samples)
    return mid > 0 and (hi - lo) > WIDE_SHARE * mid


def outliers(samples: list[float]) -> int:
    lo, _, hi = quartiles(samples)
    fence = TUKEY * (hi - lo)
    return sum(1 for x in samples if x < lo - fence or x > hi + fence)


def bimodal(samples: list[float]) -> tuple[float, float] | None:
    """The medians of the two groups when the samples fall into two; else None."""
    s = sorted(samples)
    n = len(s)
    if n < 2 * max(2, round(BIMODAL_SHARE * n)):
        return None
    least = max(2, round(BIMODAL_SHARE * n))
    gap, k = max((s[i + 1] - s[i], i + 1) for i in range(least - 1, n - least))
    low, high = s[:k], s[k:]
    spread = max(iqr(low), iqr(high))
    if gap > GAP_SHARE * statistics.median(s) and gap > 2 * spread:
        return statistics.median(low), statistics.median(high)
    return None


def drift(samples: list[float]) -> tuple[float, float] | None:
    """The medians of the first and second half when they disagree; else None."""
    half = len(samples) // 2
    first, second = samples[:half], samples[half:]
    if len(first) < 2:
        return None
    a, b = statistics.median(first), statistics.median(second)
    apart = abs(a - b)
    if apart > DRIFT_SHARE * min(a, b) and apart > max(iqr(first), iqr(second)):
        return a, b
    return None


def verdict(samples: list[float]) -> str | None:
    """Why these samples cannot be trusted as one number (the first reason that holds), or None."""
    n = len(samples)
    if n < MIN_SAMPLES:
        return f"{n} sample{'s' * (n != 1)}: too few to judge the spread"
    lo, mid, hi = quartiles(samples)
    if two := bimodal(samples):
        return f"bimodal: samples cluster near {_num(two[0])} and {_num(two[1])}"
    if moved := drift(samples):
        return f"drift: the pace changed while measuring ({_num(moved[0])} then {_num(moved[1])})"
    if (out := outliers(samples)) > OUTLIER_SHARE * n:
        return f"outliers: {out} of {n} samples beyond 1.5 IQR of the quartiles"
    if mid > 0 and hi - lo > WIDE_SHARE * mid:
        return f"wide: IQR is {100 * (hi - lo) / mid:.0f}% of the median"
    return None


def _num(x: float) -> str:
    return sig(x, 4)


@dataclass(frozen=True)
class Spread:
    """Median and quartiles of samples (µs per call), their number and outliers, and the verdict."""

    median: float
    p25: float
    p75: float
    n: int = 1
    outliers: int = 0
    unstable: str | None = None

    @classmethod
    def of(cls, samples: list[float]) -> Spread:
        lo, mid, hi = quartiles(samples)
        return cls(round(mid, 3), round(lo, 3), round(hi, 3), len(samples), outliers(samples), verdict(samples))

    def as_dict(self) -> dict:
        return {"median": self.median, "p25": self.p25, "p75": self.p75, "n": self.n,
                "outliers": self.outliers, "unstable": self.unstable}


def compare(before: dict | None, after: dict | None, threshold: float = MIN_CHANGE_SHARE) -> dict | None:
    """The one verdict on two timings (dicts with median, p25, p75), for every line that compares: run's
    `fastest`, diff, compare, `--verify`, sweeps, the integrations' summaries. "no change" (within the noise)
    when their p25–p75 bands overlap (the difference is inside both spreads) or the medians are within
    `threshold` (a fraction of `before`'s median: 0.05 is 5%), else "faster" or "slower" (beyond both
    spreads) with the % change. A timing without quartiles has no known spread: its median stands for both.
    `unstable` names a side whose measurement was marked so (too few samples, drift, ...). None when a side
    is missing."""
    if not before or not after or not before.get("median") or after.get("median") is None:
        return None
    (lo_a, hi_a), (lo_b, hi_b) = _band(before), _band(after)
    change = round(100.0 * (after["median"] - before["median"]) / before["median"], 1)
    overlap = lo_a <= hi_b and lo_b <= hi_a
    overlap = overlap or abs(after["median"] - before["median"]) <= threshold * before["median"]
    unstable = [side for side, d in (("before", before), ("after", after)) if d.get("unstable")]
    word = "no change" if overlap else ("faster" if change < 0 else "slower")
    return {"verdict": word, "change_pct": change, "unstable": unstable or None}


def _band(t: dict) -> tuple[float, float]:
    """p25 and p75, the median for a quartile the timing lacks."""
    return (t["median"] if t.get("p25") is None else t["p25"], t["median"] if t.get("p75") is None else t["p75"])


def said(change: dict | None) -> str:
    """A verdict in words: "within the noise (inside both spreads)", or "-46.0%, faster beyond both spreads"
    (with the sides marked unstable named)."""
    if not change:
        return "not compared (a side has no timing)"
    if change["verdict"] == "no change":
        text = "within the noise (inside both spreads)"
    else:
        text = f"{change['change_pct']:+.1f}%, {change['verdict']} beyond both spreads"
    return text + (f" (marked unstable: {', '.join(change['unstable'])})" if change.get("unstable") else "")
