"""The environment: every field optional, collecting never fails, settings only."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch

from attnprof import __version__
from attnprof.history import environment


def test_the_environment_has_the_versions_that_explain_a_changed_number(tmp_path):
    env = environment.collect(tmp_path)
    assert env["torch"] == torch.__version__
    assert env["attnprof"] == __version__
    assert env["python"] and env["hostname"] and env["cpu"]
    assert "git_commit" not in env  # tmp_path is no repository
    assert None not in env.values()


def test_collecting_never_fails_when_every_tool_is_missing(monkeypatch, tmp_path):
    def missing(*args, **kwargs):
        raise FileNotFoundError("no such tool")

    monkeypatch.setattr(subprocess, "run", missing)
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)  # found, but fails to run
    env = environment.collect(tmp_path)
    assert env["torch"] == torch.__version__
    assert "driver" not in env and "git_commit" not in env


def test_nvidia_smi_gives_settings_and_leaves_out_what_the_gpu_does_not_report(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(environment, "_tool", lambda argv, cwd=None: "570.86.15, 1980, 3201, [N/A], 700.00")
    assert environment._nvidia_smi() == {"driver": "570.86.15", "sm_clock_max_mhz": 1980,
                                         "mem_clock_max_mhz": 3201, "power_limit_w": 700}


def test_nvidia_smi_output_of_another_shape_gives_nothing(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(environment, "_tool", lambda argv, cwd=None: "570.86.15")
    assert environment._nvidia_smi() == {}


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_git_commit_of_the_current_folder_says_when_it_is_dirty(tmp_path):
    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    git("init", "-q")
    (tmp_path / "model.py").write_text("x = 1\n")
    git("add", "model.py")
    git("commit", "-q", "-m", "one")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert environment.git_commit(tmp_path) == head
    (tmp_path / "model.py").write_text("x = 2\n")
    assert environment.git_commit(tmp_path) == head + "+dirty"
