"""The one set of formatters for times, sizes, counts and spreads: findings and every report use these."""

from __future__ import annotations


def us(value: float | None, missing: str = "-") -> str:
    """A time given in µs, in ms from 1 ms on."""
    if value is None:
        return missing
    return f"{value / 1000:.2f} ms" if value >= 1000 else f"{value:.1f} µs"


def spread(d: dict | None) -> str:
    """`median (p25–p75) unit` of a timing dict, in the unit the median reads best in."""
    if not d:
        return "-"
    scale, unit = (1000, "ms") if d["median"] >= 1000 else (1, "µs")
    m, lo, hi = (d[k] / scale for k in ("median", "p25", "p75"))
    return f"{m:.3g} ({lo:.3g}–{hi:.3g}) {unit}" + (", unstable" if d.get("unstable") else "")


def exponent(fit: dict | None) -> str:
    """A fitted exponent of S: `2.01`, or `(1.2?)` when the fit is not meaningful, `-` without one."""
    if fit is None:
        return "-"
    return f"{fit['k']:g}" if fit["meaningful"] else f"({fit['k']:g}?)"


def mib(n: float | None, missing: str = "-") -> str:
    """A size in bytes: whole MiB from 100 MiB, one decimal below, KiB under 1 MiB."""
    if n is None:
        return missing
    if n >= 100 * 2**20:
        return f"{n / 2**20:.0f} MiB"
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.1f} KiB"


def count(x: float) -> str:
    """A count per forward: whole numbers without a decimal point."""
    return f"{x:g}"
