"""What only many ranks show (analysis.cross_rank), on SYNTHETIC rank traces (tests/synthetic_ranks.py) whose
figures are known: each step's spread across ranks, the slowest and fastest rank, the stragglers."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from attnprof.analysis.cross_rank import percentiles
from attnprof.pipeline.ranks import analyze_ranks
from synthetic_ranks import ATTENTION_US, EXPOSED_US, rank_trace, write_ranks

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "traces"  # ../shared from the root
real = pytest.mark.skipif(not CORPUS.is_dir(), reason="the real-trace corpus ../shared/corpus/traces is absent")


def _write(folder, world: int, **per_rank) -> None:
    """Rank traces with per-rank keyword arguments of rank_trace ({rank: {...}})."""
    folder.mkdir(exist_ok=True)
    for r in range(world):
        doc = rank_trace(r, world, **per_rank.get(str(r), {}))
        (folder / f"rank{r}.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))


def test_percentiles_interpolate_between_the_closest_ranks_as_numpy_does():
    assert percentiles([4.0, 1.0, 3.0, 2.0, 5.0]) == {"p0": 1.0, "p10": 1.4, "p50": 3.0, "p90": 4.6, "p100": 5.0}
    assert percentiles([7.0]) == dict.fromkeys(("p0", "p10", "p50", "p90", "p100"), 7.0)


def test_each_step_has_the_spread_of_gpu_time_exposed_comm_and_attention_across_ranks(tmp_path):
    write_ranks(tmp_path, 10, extra_us=tuple(10.0 * r for r in range(10)))
    d = analyze_ranks([tmp_path])["distributed"]
    assert [s["step"] for s in d["steps"]] == [0, 1, 2]
    step = d["steps"][1]
    assert step["exposed_comm_us"]["p0"] == step["exposed_comm_us"]["p100"] == pytest.approx(EXPOSED_US)
    assert step["attention_us"]["p0"] == pytest.approx(ATTENTION_US)
    assert step["attention_us"]["p100"] == pytest.approx(ATTENTION_US + 90.0)
    assert step["attention_us"]["p50"] == pytest.approx(ATTENTION_US + 45.0)
    assert step["gpu_us"]["p100"] - step["gpu_us"]["p0"] == pytest.approx(90.0)


def test_the_slowest_and_fastest_ranks_come_with_what_differs_between_them(tmp_path):
    write_ranks(tmp_path, 4, extra_us=(0.0, 250.0, 40.0, 0.0))
    d = analyze_ranks([tmp_path])["distributed"]
    assert (d["slowest_rank"], d["fastest_rank"]) == (1, 0)
    differs = {x["field"]: x["difference"] for x in d["differs"]}
    assert differs["attention_us"] == pytest.approx(250.0) and differs["compute_us"] == pytest.approx(250.0)
    assert "comm_us" not in differs and "exposed_comm_us" not in differs  # the same on both


def test_a_rank_late_at_the_collective_is_the_straggler_not_the_ranks_waiting_there(tmp_path):
    _write(tmp_path, 8, **{"5": {"shift_us": 120.0}, "2": {"shift_us": 2.0}})
    result = analyze_ranks([tmp_path])
    found = result["distributed"]["stragglers"]
    assert found == [{"rank": 5, "late_us": 120.0, "steps_late": 3, "steps": 3}]  # rank 2's 2 µs: within the noise
    late = {r["rank"]: r["late_us"] for r in result["ranks"]}
    assert late[5] == 120.0 and late[0] == 0.0


def test_ranks_arriving_together_have_no_straggler(tmp_path):
    write_ranks(tmp_path, 6, extra_us=(0.0, 0.0, 500.0))  # more work after the collectives: slow, not late
    d = analyze_ranks([tmp_path])["distributed"]
    assert d["stragglers"] == [] and d["slowest_rank"] == 2


@real
def test_each_steps_exposed_communication_equals_an_independent_count_on_real_ranks():
    """Two ranks of HTA's 128-rank job and a 2-rank DDP one's rank 0; counts by plain json (count_trace.py)."""
    expected = {e["trace"]: e for e in json.loads((CORPUS / "expected_comm_per_step.json").read_text())}
    names = ["hta/sampled/rank-0.json.gz", "hta/sampled/rank-1.json.gz", "hta/nccl/nccl_data.json.gz"]
    result = analyze_ranks([CORPUS / n for n in names])
    assert sorted(str(Path(r["source"]).relative_to(CORPUS)) for r in result["ranks"]) == sorted(names)
    for r in result["ranks"]:
        instances = expected[str(Path(r["source"]).relative_to(CORPUS))]["instances"]
        assert r["steps"]["exposed_comm_us"] == pytest.approx([i["exposed_us"] for i in instances], abs=1e-3)
    assert "ranks 2-127 of 128 have no trace here" in result["warnings"]
