"""`attnprof.on_trace_ready`: traces named and written as torch's tensorboard_trace_handler writes them, each
analysed in another process (one log line, a history entry on rank 0), and a broken trace or a full disk is one
warning while the loop goes on."""

from __future__ import annotations

import errno
import gzip
import json
import logging
import re
from pathlib import Path

import pytest
import torch

import attnprof
from attnprof.history import history

STEPS = 5
# torch_tb_profiler's file pattern: worker name, then the span, then the suffix (TensorBoard's profiler plugin)
TB_PLUGIN_NAME = re.compile(r"^(?P<worker>.*)\.(?P<span>\d+)\.pt\.trace\.json(\.gz)?$")


class TwoLayers(torch.nn.Module):
    """Two layers of hand-written attention: the chain `analyze` finds in a whole model's step."""

    def __init__(self, width: int = 32, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(width, 3 * width) for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, w = x.shape
        for qkv in self.qkv:
            q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in qkv(x).chunk(3, dim=-1))
            scores = torch.matmul(q, k.transpose(-1, -2)) / (q.shape[-1] ** 0.5)
            x = x + torch.matmul(scores.softmax(dim=-1), v).transpose(1, 2).reshape(b, s, w)
        return x


def train(handler, steps: int = STEPS) -> int:
    """A plain loop under torch.profiler with `handler` as on_trace_ready; the steps it finished."""
    torch.manual_seed(0)
    model = TwoLayers()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(2, 16, 32)
    done = 0
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1)
    with torch.profiler.profile(schedule=schedule, on_trace_ready=handler) as prof:
        for _ in range(steps):
            model(x).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            prof.step()
            done += 1
    return done


def test_each_trace_is_named_and_written_as_tensorboard_trace_handler_writes_it(tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    handler = attnprof.on_trace_ready(ours, worker_name="w0", use_gzip=True, history=False)
    train(handler)
    train(torch.profiler.tensorboard_trace_handler(str(theirs), "w0", use_gzip=True))  # a trace is saved once
    handler.wait()
    (mine,), (torchs,) = list(ours.iterdir()), list(theirs.iterdir())
    for path in (mine, torchs):
        assert TB_PLUGIN_NAME.match(path.name)["worker"] == "w0" and path.name.endswith(".pt.trace.json.gz")
    with gzip.open(mine) as f:
        trace = json.load(f)
    steps = [e for e in trace["traceEvents"]
             if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    assert len(steps) == 2  # the two active steps, as torch's own handler records them
    assert handler.results[0]["source"] == str(mine)


def test_each_trace_is_one_log_line_and_one_history_run(tmp_path, caplog):
    db = tmp_path / "history.sqlite"
    handler = attnprof.on_trace_ready(tmp_path / "traces", db=db)
    with caplog.at_level(logging.INFO, logger="attnprof"):
        assert train(handler) == STEPS
        (result,) = handler.wait()
    (line,) = [r.getMessage() for r in caplog.records if r.name == "attnprof"]
    assert "of the step (forward" in line and "ran hand-written" in line and "top finding: " in line
    step = result["model_step"]
    assert [row["layer"] for row in step["layers"]] == [0, 1] and 0 < step["share"]["total"] < 1
    (run,) = history(db)["runs"]
    assert run["kind"] == "trace" and run["id"] == result["history_run"]
    assert run["variants"][0]["name"] == "step" and "hand-written-attention" in run["variants"][0]["findings"]


def test_another_rank_analyses_its_trace_and_does_not_record(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    db = tmp_path / "history.sqlite"
    handler = attnprof.on_trace_ready(tmp_path / "traces", db=db)
    with caplog.at_level(logging.INFO, logger="attnprof"):
        train(handler)
        (result,) = handler.wait()
    assert result["history_run"] is None and not db.exists()
    assert [r.getMessage() for r in caplog.records][0].startswith("rank 1: attnprof: ")


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "attnprof" and r.levelno == logging.WARNING]


def test_a_corrupt_trace_is_one_warning_and_training_goes_on(tmp_path, monkeypatch, caplog):
    def corrupt(self, path, **_):
        Path(path).write_text('{"traceEvents": [{"ph": "X", "ts": ')  # cut off mid-event

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", corrupt)
    handler = attnprof.on_trace_ready(tmp_path / "traces", history=False)
    with caplog.at_level(logging.INFO, logger="attnprof"):
        assert train(handler, steps=8) == 8
        assert handler.wait() == []
    (warning,) = _warnings(caplog)
    assert "the analysis of" in warning and "failed (" in warning and warning.endswith("training goes on")
    assert "Traceback" not in warning


def test_a_full_disk_is_one_warning_and_training_goes_on(tmp_path, monkeypatch, caplog):
    def full(self, path, **_):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", full)
    handler = attnprof.on_trace_ready(tmp_path / "traces", history=False)
    with caplog.at_level(logging.INFO, logger="attnprof"):
        assert train(handler, steps=8) == 8
        handler.wait()
    (warning,) = _warnings(caplog)
    assert "could not be written" in warning and "No space left on device" in warning


def test_a_failed_history_write_is_named_as_such_and_the_analysis_stands(tmp_path, caplog):
    not_a_store = tmp_path / "history.sqlite"
    not_a_store.write_text("not a database, " * 100)  # SQLite refuses it: the write fails, the analysis does not
    handler = attnprof.on_trace_ready(tmp_path / "traces", db=not_a_store)
    with caplog.at_level(logging.INFO, logger="attnprof"):
        train(handler)
        (result,) = handler.wait()
    assert result["model_step"]["implementations"] == ["hand-written"] and result["history_run"] is None
    (warning,) = _warnings(caplog)
    assert "was analysed, but recording it in the history failed" in warning
    assert "the analysis of" not in warning and handler.failures == []


def test_a_step_traced_with_profile_memory_logs_its_peak_and_what_holds_it(tmp_path, caplog):
    from attnprof.integrations.profiler import TraceHandler

    handler = TraceHandler(tmp_path / "traces", history=False, memory="cpu")
    torch.manual_seed(0)
    model, x = TwoLayers(), torch.randn(2, 16, 32)
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1)
    with caplog.at_level(logging.INFO, logger="attnprof"):
        with torch.profiler.profile(schedule=schedule, on_trace_ready=handler, profile_memory=True) as prof:
            for _ in range(2):
                model(x).square().mean().backward()
                prof.step()
        (result,) = handler.wait()
    assert result["memory"]["peak_bytes"] > 0 and result["memory"]["held_by"]
    assert "step memory peak" in result["line"] and result["line"] in caplog.text


@pytest.mark.parametrize("name", ["analyze_step", "verify_attention"])
def test_the_integrations_door_is_the_api(name):
    assert callable(getattr(attnprof.api, name))


def test_a_deferred_handler_analyses_nothing_until_it_is_waited_for(tmp_path):
    handler = attnprof.on_trace_ready(tmp_path / "traces", history=False, defer=True)
    train(handler)
    assert handler.results == [] and handler._worker is None  # no analysis ran beside the loop
    (result,) = handler.wait()
    assert result["model_step"]["implementations"] == ["hand-written"]
