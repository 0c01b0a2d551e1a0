"""The CLI over several ranks: `analyze` with several traces or a folder, and the options `run --nproc`
checks before it starts any rank. Traces: the 2-rank H200 ring-attention fixtures."""

from __future__ import annotations

import json

from support import FIXTURES, assert_one_line_error, attnprof

CP2 = FIXTURES / "h200_cp2"
RANKS = [str(CP2 / f"1_16_32768_128_bf16_sdpa-cudnn_train_rank{r}.json.gz") for r in (0, 1)]


def test_analyze_with_two_rank_traces_prints_the_ranks_json():
    proc = attnprof("analyze", *RANKS, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["schema"] == "attnprof.ranks/1"
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    assert {"rank", "world_size", "nccl_kernels", "comm_us", "compute_us", "exposed_comm_us",
            "overlap_fraction"} <= set(result["ranks"][0])
    assert result["distributed"]["ranks_found"] == 2


def test_analyze_a_folder_draws_the_table_and_writes_the_html_report(tmp_path):
    page = tmp_path / "ranks.html"
    proc = attnprof("analyze", str(CP2), "--workers", "2", "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    assert "6 rank traces" in proc.stdout  # the folder's fwd and train traces of both ranks
    assert "rank 0 appears in 3 traces" in proc.stderr  # traces of several runs mixed: said, not hidden
    assert "<svg" in page.read_text()


def test_run_with_several_ranks_refuses_what_it_cannot_run_before_starting_them():
    proc = attnprof("run", "--nproc", "2", "--device", "cpu", "--mode", "decode")
    assert_one_line_error(proc, "mode decode")
    proc = attnprof("run", "--nproc", "2", "--device", "cpu", "--mask", "none")
    assert_one_line_error(proc, "causal")


def test_a_sequence_that_does_not_shard_is_one_line_from_the_parent_before_any_rank_starts():
    for nproc in ("3", "64"):
        proc = attnprof("run", "--nproc", nproc, "--seq", "16", "--device", "cpu")
        assert_one_line_error(proc, "--seq 16", f"2 x {nproc}")  # one line: no rank printed it again


def test_an_unknown_variant_or_zero_kv_heads_with_several_ranks_is_one_line():
    assert_one_line_error(attnprof("run", "--nproc", "2", "--device", "cpu", "--variants", "nosuch"), "nosuch")
    assert_one_line_error(attnprof("run", "--nproc", "2", "--device", "cpu", "--kv-heads", "0"), "kv-heads")
    assert_one_line_error(attnprof("run", "--nproc", "2", "--device", "cpu", "--heads", "0"), "heads")
