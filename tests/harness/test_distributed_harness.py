"""`attnprof run --nproc N`: the launcher, the per-rank cases and rank 0's merge. torch's context parallelism
has no CPU attention kernels (it rings only the flash, efficient and cuDNN CUDA backends), so on CPU the
ranks run plain SDPA on their own shard over gloo: that exercises launching through torch.distributed.run,
per-rank traces with distributedInfo, gather_object and the merge, not the ring itself (GPU-recorded
ring traces are read in tests/analysis/test_distributed_h200.py)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnprof.harness.distributed import case_record
from attnprof.harness.launch import is_worker, without_nproc
from attnprof.variants.context_parallel import cp_support
from support import attnprof
from synthetic_ranks import write_ranks


def test_the_ranks_are_started_without_the_nproc_option():
    assert without_nproc(["run", "--nproc", "2", "--seq", "64"]) == ["run", "--seq", "64"]
    assert without_nproc(["--debug", "run", "--nproc=4", "--json"]) == ["--debug", "run", "--json"]


def test_a_rank_knows_it_was_started_by_torchrun(monkeypatch):
    for key in ("TORCHELASTIC_RUN_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"):
        monkeypatch.delenv(key, raising=False)
    assert not is_worker()
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    assert is_worker()


@pytest.mark.parametrize("rank", [True, False])
def test_a_rank_ends_without_the_interpreters_teardown_keeping_what_it_printed_and_its_exit_handlers(tmp_path, rank):
    """cli.finish on a torchrun rank (each rank of `attnprof run --nproc N` ends there): the exit handlers run and
    the streams are flushed, then the process ends before the teardown in which a finished gloo rank once aborted;
    an object's finaliser, which that teardown runs, then never runs. Not a rank: the usual exit, finaliser run."""
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHELASTIC_RUN_ID", "RANK", "WORLD_SIZE",
                                                           "LOCAL_RANK", "MASTER_ADDR")}
    if rank:
        env["TORCHELASTIC_RUN_ID"] = "x"
    script = ("import atexit\n"
              f"atexit.register(lambda: open({str(tmp_path / 'handler_ran')!r}, 'w').close())\n"
              "class Torn:\n"
              f"    def __del__(self, _open=open): _open({str(tmp_path / 'torn_down')!r}, 'w').close()\n"
              "kept = Torn()\n"
              "print('printed before the end', end='')\n"
              "from attnprof.cli import finish\n"
              "finish(3)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "printed before the end" and (tmp_path / "handler_ran").exists()
    assert (tmp_path / "torn_down").exists() is not rank


def test_context_parallelism_covers_the_ring_backends_and_flex_on_gpus_only():
    assert cp_support("sdpa-cudnn", "cuda") is None and cp_support("flex", "cuda") is None
    assert "CPU" in cp_support("sdpa-flash", "cpu")
    assert "covers" in cp_support("naive", "cuda")


def test_rank_0_times_each_repeat_by_its_slowest_rank_and_divides_one_gpu_by_n(tmp_path):
    from attnprof.pipeline.ranks import rank_summary

    paths = write_ranks(tmp_path, 2)
    gathered = [{"rank": r, "status": "ok", "reason": None, "samples_us": s, "trace": p.name,
                 "summary": rank_summary(p), "peak_memory_bytes": 10 + r}
                for r, (s, p) in enumerate(zip(([100.0, 120.0, 110.0], [105.0, 90.0, 130.0]), paths, strict=True))]
    record = case_record("sdpa-cudnn", "train", gathered, {"status": "ok", "us": {"median": 180.0}}, 2)
    assert record["step_us"]["median"] == 120.0  # per repeat max(100, 105), max(120, 90), max(110, 130)
    assert record["per_rank_us"] == [110.0, 105.0]
    assert record["ideal_us"] == 90.0 and record["speedup"] == 1.5 and record["efficiency"] == 0.75
    assert [r["rank"] for r in record["ranks"]] == [0, 1] and record["peak_memory_bytes"] == 11


def test_one_failing_rank_fails_the_case_with_its_reason():
    gathered = [{"rank": 0, "status": "ok", "reason": None}, {"rank": 1, "status": "oom", "reason": "CUDA OOM"}]
    record = case_record("sdpa-flash", "fwd", gathered, None, 2)
    assert record["status"] == "oom" and record["reason"] == "rank 1: CUDA OOM"
    assert "step_us" not in record


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("cp")
    proc = attnprof("run", "--nproc", "2", "--device", "cpu", "--batch", "1", "--heads", "2", "--seq", "128",
                    "--head-dim", "32", "--repeats", "2", "--warmup", "1", "--schedule", "0,1,2",
                    "--variants", "sdpa-auto", "--cp-modes", "fwd,train", "--out", str(out), "--json",
                    "--db", str(out / "history.sqlite"), timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout[proc.stdout.index("{"):])


def test_two_gloo_ranks_launched_by_torchrun_merge_into_one_result(gloo_run):
    assert gloo_run["schema"] == "attnprof.cp-run/1"
    assert gloo_run["config"]["world_size"] == 2 and gloo_run["config"]["backend"] == "gloo"
    assert gloo_run["config"]["launcher"] == "torch.distributed.run"
    assert [(v["name"], v["mode"], v["status"]) for v in gloo_run["variants"]] == [
        ("sdpa-auto", "fwd", "ok"), ("sdpa-auto", "train", "ok")]
    for v in gloo_run["variants"]:
        assert v["sharding"].startswith("shard-local")
        assert [r["rank"] for r in v["ranks"]] == [0, 1]
        assert v["step_us"]["median"] > 0 and "speedup" not in v  # less work than the full problem
        assert v["single_gpu_reason"]


def test_each_rank_wrote_its_own_trace_with_its_rank_in_it(gloo_run):
    run_dir = Path(gloo_run["run_dir"])
    assert (run_dir / "report.html").is_file()
    for v in gloo_run["variants"]:
        for rank, name in enumerate(v["traces"]):
            doc = json.loads(gzip.decompress((run_dir / name).read_bytes()))
            assert doc["distributedInfo"]["rank"] == rank and doc["distributedInfo"]["world_size"] == 2
            assert doc["distributedInfo"]["backend"] == "gloo"


def test_rank_0_records_the_run_in_the_history_under_the_command_typed(gloo_run):
    store = Path(gloo_run["run_dir"]).parent / "history.sqlite"
    proc = attnprof("history", "--db", str(store), "--json")
    assert proc.returncode == 0, proc.stderr
    (run,) = json.loads(proc.stdout)["runs"]
    assert "--nproc 2" in run["command"] and run["kind"] == "run"
    assert [(v["name"], v["problem"], v["status"]) for v in run["variants"]] == [
        ("sdpa-auto", "1_2_128_32_bf16_cp2", "ok"), ("sdpa-auto", "1_2_128_32_bf16_train_cp2", "ok")]
    assert run["variants"][0]["device_us"]["median"] == gloo_run["variants"][0]["step_us"]["median"]


def test_attnprof_report_on_the_folder_redraws_both_modes_and_links_the_four_rank_traces(gloo_run):
    run_dir = Path(gloo_run["run_dir"])
    (run_dir / "report.html").unlink()
    proc = attnprof("report", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    page = (run_dir / "report.html").read_text()
    assert "Nothing ran" not in page and "No traces" not in page
    assert "sdpa-auto fwd" in page and "sdpa-auto train" in page
    for v in gloo_run["variants"]:
        assert all(f'href="{name}"' in page for name in v["traces"])


def test_piped_the_case_table_is_never_cut_to_an_ellipsis(gloo_run):
    from rich.console import Console

    from attnprof.report.distributed import render_cp_run

    out = Console(record=True, width=80)
    render_cp_run(gloo_run, out)
    text = out.export_text()
    assert "…" not in text and max(map(len, text.splitlines())) <= 80
    assert "sdpa-auto fwd: status: ok; step (slowest rank):" in text


def test_the_parent_refuses_more_ranks_than_gpus_and_a_sequence_that_does_not_shard(monkeypatch):
    import torch

    from attnprof.harness.distributed import CPRunConfig, check_launch
    from attnprof.problem import Problem

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    config = CPRunConfig(problem=Problem(batch=1, heads=2, seq=96, head_dim=32), variants=("sdpa-cudnn",))
    check_launch(config, 2)  # 96 = 2 x 2 x 24, and two GPUs
    with pytest.raises(ValueError, match="one GPU per rank, and 2 are visible"):
        check_launch(config, 3)
    with pytest.raises(ValueError, match="give a multiple of 10, e.g. --seq 90"):
        check_launch(config, 5)
