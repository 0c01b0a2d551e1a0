"""What tests in every stage folder share (tests/ is on pythonpath): fixture paths, the CLI in a child process."""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
H200 = FIXTURES / "h200"  # recorded on an H200 with benchmarks/device_runs/record_traces.py (torch 2.11, cuDNN 9.19)
CPU = FIXTURES / "cpu"  # recorded on CPU with the same script (torch 2.13)
# Real traces nobody on the team recorded (../shared/corpus/traces/README.md names each one's source), beside the
# checkout (CI has it; a bare clone has not: the tests that read them skip); ATTNPROF_CORPUS points elsewhere, and a
# git worktree kept one folder deeper (../wt/NAME) finds it one level further up
CORPUS = next((p for p in ([Path(os.environ["ATTNPROF_CORPUS"])] if os.environ.get("ATTNPROF_CORPUS") else
                           [Path(__file__).resolve().parents[n] / "shared" / "corpus" / "traces" for n in (2, 3)])
               if p.is_dir()), None)


def corpus_trace(relative: str) -> Path:
    """A corpus trace's path; the test is skipped when the corpus (or that trace) is not there."""
    import pytest

    path = (CORPUS or Path("/nonexistent")) / relative
    if not path.is_file():
        pytest.skip(f"the real-trace corpus (or {relative}) is not beside the checkout")
    return path


def h200_trace(variant: str) -> Path:
    return H200 / f"8_16_1024_64_bf16_{variant}.json.gz"


def cpu_trace(variant: str) -> Path:
    return CPU / f"1_2_64_32_bf16_{variant}.json.gz"


def attnprof(*args: str, timeout: int = 120, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attnprof", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def assert_one_line_error(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("USDT")]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


def attnprof_into_closed_pipe(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """`attnprof ARGS | head -0`: stdout is a pipe whose reader is gone before the command writes."""
    proc = subprocess.Popen([sys.executable, "-m", "attnprof", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # before the child has even imported attnprof: its first write finds the pipe broken
    err = proc.stderr.read()
    return subprocess.CompletedProcess(proc.args, proc.wait(timeout=timeout), "", err)


FP16_TOLERANCE = 2e-3  # the Triton kernel's float16 output rounding is ~5e-4 at the interpreted cases' magnitudes


_FORKS: list[subprocess.Popen] = []


def _forks() -> subprocess.Popen:
    """This worker's interpreter_forks.py, started on first use (again if it died); at exit its stdin is closed,
    so it ends, and it is waited for."""
    if not _FORKS or _FORKS[-1].poll() is not None:
        if not _FORKS:
            atexit.register(lambda: _FORKS[-1].communicate(timeout=60))
        _FORKS.append(subprocess.Popen([sys.executable, str(Path(__file__).with_name("interpreter_forks.py"))],
                                       env={**os.environ, "TRITON_INTERPRET": "1"}, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True))
    return _FORKS[-1]


def run_interpreted(script: Path, *args: str, timeout: int = 300) -> dict:
    """The JSON line a case script prints last, run in its own process under Triton's interpreter
    (TRITON_INTERPRET must be set before Triton is imported): a child forked from this worker's
    interpreter_forks.py, which has torch and Triton imported already (it says why)."""
    forks = _forks()
    with tempfile.TemporaryDirectory() as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        request = {"script": str(script), "args": list(args), "env": {**os.environ, "TRITON_INTERPRET": "1"},
                   "out": str(out), "err": str(err), "timeout": timeout}
        forks.stdin.write(json.dumps(request) + "\n")
        forks.stdin.flush()
        reply = forks.stdout.readline()
        assert reply, f"interpreter_forks.py ended (status {forks.wait()})"
        stdout, stderr = (p.read_text() if p.exists() else "" for p in (out, err))
    status = json.loads(reply)["returncode"]
    late = f" (SIGALRM: past its {timeout} s)" if status == -14 else ""
    assert status == 0, f"{script.name} exited with status {status}{late}\n{stderr[-3000:]}"
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.fixture(autouse=True, scope="module")
def own_cache(tmp_path_factory):
    """Imported by a test module (autouse there): a cache of the module's own, never the user's (subprocesses
    inherit it). The module's first run measures the CPU's ceilings into it (~3 s), its later runs read them
    (what those modules test does not depend on which run measured)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        yield
