"""Views of hundreds of ranks (report.many_ranks): a terminal summary of one screen whatever the rank count,
the per-rank table for other tools, the ranks-by-step heat map. SYNTHETIC summaries: a few rank traces of
tests/synthetic_ranks.py analysed once, their summaries copied to 96 or 1,024 ranks."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from rich.console import Console

from attnprof.errors import UserError
from attnprof.pipeline.ranks import merge, rank_summary
from attnprof.report.distributed import ranks_page, render_ranks
from attnprof.report.many_ranks import heat_map_svg
from attnprof.report.rank_table import TABLE_COLUMNS, write_rank_table
from synthetic_ranks import write_ranks


@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    """Four ranks' summaries: three amounts of extra attention work."""
    paths = write_ranks(tmp_path_factory.mktemp("ranks"), 4, extra_us=(0.0, 30.0, 0.0, 200.0))
    return [rank_summary(p) for p in paths]


def _job(kinds: list[dict], world: int, unread: int = 0) -> dict:
    summaries = [{**json.loads(json.dumps(kinds[r % len(kinds)])), "rank": r, "world_size": world,
                  "source": f"/traces/rank{r}.json.gz"} for r in range(world - unread)]
    return merge(summaries + [{"source": f"/traces/rank{r}.json.gz", "error": f"/traces/rank{r}.json.gz: not JSON"}
                              for r in range(world - unread, world)])


@pytest.mark.parametrize("world", [96, 1024])
def test_the_terminal_summary_of_many_ranks_fits_a_screen_and_lists_no_rank_row(kinds, world):
    out = io.StringIO()
    render_ranks(_job(kinds, world, unread=7), Console(file=out, width=80))
    assert len(out.getvalue().splitlines()) < 80, out.getvalue()
    text = " ".join(out.getvalue().split())  # words a line wrap split
    assert f"{world - 7} rank traces" in text and "7 unread" in text and "2 more unread" in text
    assert "slowest rank 3" in text and "fastest 0" in text and "attention +200.0 µs" in text
    assert not re.search(r"│ 57\s+│", out.getvalue())  # no row per rank


def test_a_few_ranks_still_get_a_row_each(kinds):
    out = io.StringIO()
    render_ranks(_job(kinds, 4), Console(file=out, width=200))
    assert len(re.findall(r"│ [0-3]\s+│ 2\s+│", out.getvalue())) == 4


def test_the_rank_table_is_written_as_json_lines_and_csv_with_unread_ranks(kinds, tmp_path):
    result = _job(kinds, 12, unread=2)
    result["cluster"] = {"scheduler": "tcp://127.0.0.1:1", "workers": 2, "rerun": ["/traces/rank4.json.gz"]}
    lines = write_rank_table(result, tmp_path / "ranks.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["rank"] for r in rows[:10]] == list(range(10)) and len(rows) == 12
    assert rows[3]["attention_us"] == 700.0 and rows[4]["rerun"] and not rows[3]["rerun"]
    assert rows[10]["status"] == "unread" and rows[10]["reason"].endswith("not JSON")
    table = list(csv.DictReader(write_rank_table(result, tmp_path / "ranks.csv").read_text().splitlines()))
    assert tuple(table[0]) == TABLE_COLUMNS and len(table) == 12 and table[3]["attention_us"] == "700.0"
    with pytest.raises(UserError, match=".jsonl or a .csv"):
        write_rank_table(result, tmp_path / "ranks.txt")
    assert not (tmp_path / "ranks.txt").exists()


def test_the_heat_map_has_a_cell_per_rank_and_step_coloured_from_least_to_most(kinds):
    ranks = _job(kinds, 8)["ranks"]
    svg = heat_map_svg(ranks, "busy_us")
    assert svg.count("<rect") == 8 * 3
    assert svg.count('fill="#ffffff"') == 4 * 3  # ranks 0, 2, 4, 6: the least GPU time
    assert svg.count('fill="#c81e1e"') == 2 * 3  # ranks 3 and 7: the most
    assert "rank 3 step 1: 900.0 µs" in svg
    assert "Ranks by step" in ranks_page(_job(kinds, 8))
