"""Views of hundreds of ranks (`attnprof.ranks/1`): the terminal summary that never lists every rank (a
screen, whatever the rank count) and the ranks-by-step heat map of the HTML page. The per-rank table for
other tools: report.rank_table; the cross-rank facts themselves: analysis.cross_rank."""

from __future__ import annotations

from html import escape

from rich.console import Console

from attnprof.report.layout import print_table
from attnprof.report.text import TEXT_LIMIT, safe_text
from attnprof.units import us

FIELDS = {"busy_us": "GPU time", "compute_us": "compute", "attention_us": "attention", "comm_us": "comm",
          "exposed_comm_us": "exposed comm", "merge_us": "merge", "span_us": "span"}
STEP_FIELDS = {"gpu_us": "GPU time", "exposed_comm_us": "exposed comm", "attention_us": "attention"}
SHOWN_STEPS = 8  # the per-step table's rows in the terminal; the rest in --json
SHOWN_STRAGGLERS = 5
SHOWN_DIFFERENCES = 4
HEAT = ((255, 255, 255), (200, 30, 30))  # least to most


def render_summary(result: dict, out: Console) -> None:
    """A screen about every rank, whatever their number: spreads across ranks, per step, the slowest and
    fastest ranks and what differs, stragglers, skew. The full table is --ranks-out's."""
    d = result["distributed"]
    cluster = result.get("cluster")
    where = f"; on {safe_text(cluster['scheduler'])}, {cluster['workers']} workers" if cluster else ""
    out.print(f"[bold]{len(result['ranks'])} rank traces[/] of world size {result['world_size']}, region "
              f"'{safe_text(result['region'])}', {d.get('instances', 0)} instances each; "
              f"{len(result.get('unread', []))} unread, {len((cluster or {}).get('rerun', []))} re-run{where}")
    across = d.get("across_ranks") or {}
    rows = [[FIELDS[k], *(us(p[q]) for q in ("p0", "p10", "p50", "p90", "p100"))] for k, p in across.items()
            if k in FIELDS]
    if rows:
        print_table(out, "each rank's median instance, across ranks", ("", "min", "p10", "p50", "p90", "max"), rows)
    _render_steps(d.get("steps") or [], out)
    _render_extremes(d, out)
    _render_stragglers(d.get("stragglers") or [], out)
    for u in result.get("unread", [])[:SHOWN_STRAGGLERS]:
        out.print(f"[yellow]unread[/] {safe_text(u['reason'], TEXT_LIMIT)}")
    if len(result.get("unread", [])) > SHOWN_STRAGGLERS:
        out.print(f"... and {len(result['unread']) - SHOWN_STRAGGLERS} more unread (--ranks-out)")
    out.print("every rank's row: --ranks-out FILE.csv or FILE.jsonl, or --json")


def _render_steps(steps: list[dict], out: Console) -> None:
    rows = [[str(s["step"]), *(f"{us(s[k]['p50'])} ({us(s[k]['p90'])}, {us(s[k]['p100'])})" for k in STEP_FIELDS)]
            for s in steps[:SHOWN_STEPS]]
    if rows:
        print_table(out, "per step across ranks: p50 (p90, max)", ("step", *STEP_FIELDS.values()), rows)
    if len(steps) > SHOWN_STEPS:
        out.print(f"... and {len(steps) - SHOWN_STEPS} more steps (--json)")


def _render_extremes(d: dict, out: Console) -> None:
    if d.get("slowest_rank") is None:
        return
    differs = ", ".join(f"{FIELDS.get(x['field'], x['field'].removesuffix('_us'))} {_signed(x)}"
                        for x in (d.get("differs") or [])[:SHOWN_DIFFERENCES]) or "nothing"
    out.print(f"slowest rank {d['slowest_rank']} (most compute) against fastest {d.get('fastest_rank')}: {differs}")
    out.print(f"skew start {us(d.get('skew_start_us'))}, end {us(d.get('skew_end_us'))}; last to finish "
              f"{d.get('last_to_finish')}; compute max/min {d.get('imbalance')}")


def _signed(x: dict) -> str:
    if x["field"].endswith("_us"):
        sign = "+" if x["difference"] >= 0 else "-"
        return f"{sign}{us(abs(x['difference']))} ({us(x['slowest'])} vs {us(x['fastest'])})"
    return f"{x['slowest']} vs {x['fastest']}"


def _render_stragglers(found: list[dict], out: Console) -> None:
    if not found:
        out.print("stragglers: none (no rank reaches the first collective late in most steps)")
        return
    named = ", ".join(f"rank {s['rank']} {us(s['late_us'])} late in {s['steps_late']} of {s['steps']} steps"
                      for s in found[:SHOWN_STRAGGLERS])
    more = f", and {len(found) - SHOWN_STRAGGLERS} more" if len(found) > SHOWN_STRAGGLERS else ""
    out.print(f"stragglers (late at the first collective; the others wait there): {named}{more}")


def heat_map_svg(ranks: list[dict], field: str = "busy_us", cell: tuple[int, int] = (48, 6)) -> str:
    """Ranks (rows) by steps (columns), each cell coloured by the rank's `field` in that step between the
    least and the most of all cells; its value in the cell's title."""
    grid = [((r.get("steps") or {}).get(field) or []) for r in ranks]
    values = [v for row in grid for v in row if v is not None]
    if not values:
        return ""
    lo, hi = min(values), max(values)
    (w, h), left, top = cell, 70, 16
    steps = max(len(row) for row in grid)
    parts = [f'<text x="{left + i * w + 2}" y="12" font-size="11">step {i}</text>' for i in range(steps)]
    for y, (r, row) in enumerate(zip(ranks, grid, strict=True)):
        if h >= 10 or y % max(1, 12 // h) == 0:
            parts.append(f'<text x="0" y="{top + y * h + h}" font-size="{min(h + 2, 11)}">rank {r["rank"]}</text>')
        for i, v in enumerate(row):
            if v is not None:
                parts.append(f'<rect x="{left + i * w}" y="{top + y * h}" width="{w}" height="{h}" '
                             f'fill="{_heat((v - lo) / (hi - lo) if hi > lo else 0.0)}"><title>rank {r["rank"]} '
                             f'step {i}: {escape(us(v))}</title></rect>')
    width, height = left + steps * w + 4, top + len(ranks) * h + 4
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'font-family="sans-serif">{"".join(parts)}</svg>')


def _heat(share: float) -> str:
    return "#" + "".join(f"{round(a + (b - a) * share):02x}" for a, b in zip(*HEAT, strict=True))
