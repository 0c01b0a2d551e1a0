"""Runs the interpreted case scripts (tests/*/interpreted_*.py) for one pytest worker: imports torch and Triton
once, under TRITON_INTERPRET=1, then forks a child per script it is sent, which runs it as `python SCRIPT ARGS`
would (its folder first on sys.path, run as __main__, stdout and stderr into the files named). Each script used
to start a process of its own that spent ~2.5 s importing torch and Triton before interpreting anything; the
kernel itself is imported by each child, so every script still registers its ops and builds its kernels afresh.

One JSON request a line on stdin: {"script", "args", "env", "out", "err", "timeout"}; one {"returncode"} a line
on stdout. Ends when stdin does (its pytest worker ended). Started by support.run_interpreted.
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import traceback

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

import torch  # noqa: E402, F401  (what every case script imports first: loaded once, before any fork)
import triton  # noqa: E402, F401  (under the interpreter: it must be on before triton's first import)


def _child(script: str, args: list[str], env: dict, out: str, err: str, timeout: int) -> int:
    """In the forked child: the script's exit status, as its own process would have ended."""
    signal.alarm(timeout)  # SIGALRM ends a script that runs past it, as subprocess.run's timeout did
    os.environ.clear()
    os.environ.update(env)
    written = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out, written), (2, err, written)):
        os.dup2(os.open(path, flags), fd)
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # what the interpreter prints for an uncaught exception, and its exit status
        traceback.print_exc()
        return 1


def run(request: dict) -> int:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = _child(**request)
        finally:  # no interpreter teardown in a forked child: flush what it wrote and leave
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


if __name__ == "__main__":
    for line in sys.stdin:
        print(json.dumps({"returncode": run(json.loads(line))}), flush=True)
