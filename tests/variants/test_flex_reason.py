"""flex on a CPU is not run, and says precisely why: it runs only compiled, and Inductor's CPU code is C++."""

from __future__ import annotations

from attnprof.problem import Problem
from attnprof.variants.flex import supports_flex


def test_flex_on_cpu_names_the_compiler_it_would_need(monkeypatch):
    monkeypatch.setenv("CXX", "")
    monkeypatch.setattr("shutil.which", lambda name: None)
    why = supports_flex(Problem(batch=1, heads=2, seq=64, head_dim=32), "cpu")
    assert "only under torch.compile" in why and "no C++ compiler is here" in why
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}" if name == "g++" else None)
    why = supports_flex(Problem(batch=1, heads=2, seq=64, head_dim=32), "cpu")
    assert "(g++)" in why and "builds for minutes on" in why
