"""What a run ran on: the versions and hardware settings that explain a changed number.

Every field is optional and collecting never fails: a missing tool, a GPU that does not report its
clocks or a directory outside git leave that field out. Only settings go in (max and application
clocks, the power limit), never instantaneous readings (current clock, temperature), so two runs on
an unchanged machine have equal environments and `compare` names only real changes.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import socket
import subprocess
from pathlib import Path

from attnprof.version import __version__

# nvidia-smi --query-gpu field -> our key; values are settings, not readings
NVIDIA_SMI_FIELDS = {
    "driver_version": "driver",
    "clocks.max.sm": "sm_clock_max_mhz",
    "clocks.max.mem": "mem_clock_max_mhz",
    "clocks.applications.graphics": "sm_clock_app_mhz",
    "power.limit": "power_limit_w",
}
NOT_REPORTED = {"", "[N/A]", "[Not Supported]", "N/A", "Not Supported"}
TOOL_TIMEOUT_S = 5


def collect(cwd: str | Path | None = None) -> dict:
    """The environment of the current process, every unknown field left out."""
    env = {"attnprof": __version__, "python": platform.python_version(), "os": platform.platform(),
           "hostname": _guarded(socket.gethostname), "cpu": _guarded(cpu_model)}
    env |= _guarded(_torch_side) or {}
    env["triton"] = _guarded(importlib.metadata.version, "triton")
    env |= _guarded(_nvidia_smi) or {}
    env["git_commit"] = _guarded(git_commit, Path(cwd or os.getcwd()))
    return {k: v for k, v in env.items() if v not in (None, "")}


def _guarded(fn, *args):
    """fn(*args), or None when it fails in any way: the environment is a courtesy, never a failure."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - any failure just leaves the field out
        return None


def cpu_model() -> str | None:
    """The CPU's marketing name where the OS says it (Linux /proc/cpuinfo, macOS sysctl), else the
    architecture: enough to tell two machines apart."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith(("model name", "hardware")):
                return line.split(":", 1)[1].strip()
    if platform.system() == "Darwin":
        found = _tool(["sysctl", "-n", "machdep.cpu.brand_string"])
        if found:
            return found
    return platform.processor() or platform.machine() or None


def _torch_side() -> dict:
    import torch

    side = {"torch": torch.__version__, "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None)}
    if torch.backends.cudnn.is_available():
        side["cudnn"] = torch.backends.cudnn.version()
    if torch.cuda.is_available():
        side["gpu"] = torch.cuda.get_device_name(0)
        side["gpu_count"] = torch.cuda.device_count()
        side["nccl"] = _guarded(_nccl_version)
    return side


def _nccl_version() -> str:
    import torch

    version = torch.cuda.nccl.version()
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def _nvidia_smi() -> dict:
    """Driver, max and application clocks and power limit of GPU 0, from one nvidia-smi call."""
    if not shutil.which("nvidia-smi"):
        return {}
    out = _tool(["nvidia-smi", "--id=0", f"--query-gpu={','.join(NVIDIA_SMI_FIELDS)}",
                 "--format=csv,noheader,nounits"])
    if not out:
        return {}
    values = [v.strip() for v in out.splitlines()[0].split(",")]
    if len(values) != len(NVIDIA_SMI_FIELDS):
        return {}
    return {key: _number(v) for key, v in zip(NVIDIA_SMI_FIELDS.values(), values, strict=True)
            if v not in NOT_REPORTED}


def _number(text: str) -> float | int | str:
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() else value


def git_commit(cwd: Path) -> str | None:
    """HEAD of the git repository holding cwd, with `+dirty` when tracked files differ from it."""
    head = _tool(["git", "rev-parse", "HEAD"], cwd)
    if not head:
        return None
    dirty = _tool(["git", "status", "--porcelain", "--untracked-files=no"], cwd)
    return head + ("+dirty" if dirty else "")


def _tool(argv: list[str], cwd: Path | None = None) -> str | None:
    """A tool's stripped stdout; None when it is missing, fails or hangs."""
    try:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None
