"""The one set of formatters for times, sizes, counts and spreads: findings and every report use these."""

from __future__ import annotations

import math


def sig(x: float, digits: int = 3) -> str:
    """`x` to `digits` significant digits as `:g` writes them (`59.5`, `9`), but never in scientific
    notation (`1000`, not `1e+03`)."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    text = f"{round(x, decimals):.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _time_unit(value_us: float) -> tuple[float, str]:
    """The scale and unit a time given in µs reads best in: µs, ms from 1 ms, s from 1 s."""
    if abs(value_us) >= 1e6:
        return 1e6, "s"
    return (1000, "ms") if abs(value_us) >= 1000 else (1, "µs")


def us(value: float | None, missing: str = "-") -> str:
    """A time given in µs: `12.3 µs`, `1.25 ms`, `2.50 s`."""
    if value is None:
        return missing
    scale, unit = _time_unit(value)
    return f"{value / scale:.1f} µs" if scale == 1 else f"{value / scale:.2f} {unit}"


def spread(d: dict | None) -> str:
    """`median (p25–p75) unit` of a timing dict, in the unit the median reads best in."""
    if not d:
        return "-"
    scale, unit = _time_unit(d["median"])
    m, lo, hi = (sig(d[k] / scale) for k in ("median", "p25", "p75"))
    return f"{m} ({lo}–{hi}) {unit}" + (", unstable" if d.get("unstable") else "")


def _rate(value: float | None, base: str, missing: str) -> str:
    """A rate given in units of 10^12 `base`/s, with the prefix that keeps it readable (T, G, M, k)."""
    if value is None:
        return missing
    for scale, prefix in ((1, "T"), (1e-3, "G"), (1e-6, "M")):
        if abs(value) >= scale:
            return f"{sig(value / scale)} {prefix}{base}/s"
    return f"{sig(value * 1e9)} k{base}/s" if value else f"0 {base}/s"


def flops(tflops: float | None, missing: str = "-") -> str:
    """A compute rate given in TFLOP/s: `612 TFLOP/s`, or `1.05 GFLOP/s` on a CPU."""
    return _rate(tflops, "FLOP", missing)


def bandwidth(tbps: float | None, missing: str = "-") -> str:
    """A memory rate given in TB/s: `4.03 TB/s`, or `16.4 GB/s` on a CPU."""
    return _rate(tbps, "B", missing)


def exponent(fit: dict | None) -> str:
    """A fitted exponent of S: `2.01`, or `(1.2?)` when the fit is not meaningful, `-` without one."""
    if fit is None:
        return "-"
    k = sig(fit["k"])
    return k if fit["meaningful"] else f"({k}?)"


def error(x: float | None, missing: str = "-") -> str:
    """A max error against the reference: `8.7e-03` below 1 (the exponent says how many digits agree), the
    plain number from 1 on (`12.5`, never `1.2e+01`)."""
    if x is None:
        return missing
    return f"{x:.1e}" if abs(x) < 1 else sig(x)


def mib(n: float | None, missing: str = "-") -> str:
    """A size in bytes: whole MiB from 100 MiB, one decimal below, KiB under 1 MiB."""
    if n is None:
        return missing
    if n >= 100 * 2**20:
        return f"{n / 2**20:.0f} MiB"
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.1f} KiB"


def count(x: float) -> str:
    """A count per forward: whole numbers without a decimal point (and never `1e+06`)."""
    return str(int(x)) if float(x).is_integer() else sig(x)
