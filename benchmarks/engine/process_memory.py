"""Peak memory of a command and of the processes it forks (a big trace's readers), as the machine holds it.

Sampled every 10 ms from /proc while the command runs:
- **held**: the command's RSS plus each child's private pages (`Private_Clean` + `Private_Dirty` of
  /proc/PID/smaps_rollup). A forked reader shares its parent's pages until it writes them; those, and the
  libraries both map, are in the parent's RSS already, so every page the processes hold counts once. This is
  the figure set against the bar.
- **RSS summed**: every process's RSS added up, so a page a child shares with its parent counts twice: an
  overcount, shown beside it.
The command's own high-water mark (VmHWM) stands in where it is higher (a peak between two samples).
"""

from __future__ import annotations

import json
import os
import subprocess
import time


def peaks(cmd: list[str]) -> dict[str, int]:
    """{"held", "rss_summed", "own"} in bytes for `cmd`, which prints {"peak": its own VmHWM} as JSON."""
    held = summed = 0
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as proc:
        while proc.poll() is None:
            children = _children(proc.pid)
            own = _status_kb(proc.pid, "VmRSS:")
            held = max(held, own + sum(map(_private_kb, children)))
            summed = max(summed, own + sum(_status_kb(c, "VmRSS:") for c in children))
            time.sleep(0.01)
        out = proc.stdout.read()
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    own = json.loads(out)["peak"]
    return {"held": max(own, held * 1024), "rss_summed": max(own, summed * 1024), "own": own}


def own_peak() -> int:
    """This process's peak RSS in bytes. VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent
    through fork and exec, so a child of a big process would report the parent's size."""
    return _status_kb(os.getpid(), "VmHWM:") * 1024


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])  # the name, in parentheses, may hold spaces
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            found.append(int(entry))
    return found


def _status_kb(pid: int, field: str) -> int:
    """A field of /proc/PID/status in KiB (0 once the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(field))
    except (OSError, StopIteration):
        return 0


def _private_kb(pid: int) -> int:
    """The pages only `pid` holds, in KiB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return sum(int(line.split()[1]) for line in f if line.startswith(("Private_Clean:", "Private_Dirty:")))
    except OSError:
        return 0
