"""Shared test setup: GPU-only tests carry the `cuda` marker and skip cleanly without a GPU."""

from __future__ import annotations

import atexit
import logging
import os
import sys

import pytest

# One OpenMP thread per process unless the caller chose otherwise. The suite runs two workers on two cores, and
# each starts processes of its own (the CLI, Triton's interpreter): torch's default of a thread per core put four
# or more spinning threads on two cores, and small in-process ops paid for it (tests/fix/to_sdpa: 41 s -> 8 s of a
# worker's time, measured). Set here, at conftest import, so the workers pytest-xdist starts after it, and every
# child they start, inherit it before they import torch; tests that set threads themselves still do.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.fixture(autouse=True, scope="session")
def history_outside_the_user_data_folder(tmp_path_factory):
    """Every run a test makes records into a throwaway history, never the user's (or CI's) data folder;
    the variable reaches the subprocesses the tests start too."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ATTNPROF_HOME", str(tmp_path_factory.mktemp("attnprof-home")))
        yield


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config):
    """Triton's compiler bindings (nanobind) report every object of theirs still alive when the interpreter
    shuts down: after a test compiled a kernel in this process (tests/triton_kernel: the Hopper plans and
    backward), ~50 lines of "nanobind: leaked 326 functions!" followed the summary. They are Triton's, not a
    leak of ours, and they come only from finalization: once the session is over (its results written by
    pytest's hooks) and the exit handlers registered after this one have run, a process that loaded them
    flushes its streams and logging and ends without that finalization, with pytest's own exit status."""
    atexit.register(_skip_triton_teardown, config)


def pytest_sessionfinish(session, exitstatus):
    session.config.stash[_EXIT] = int(exitstatus)


_EXIT = pytest.StashKey[int]()


def _skip_triton_teardown(config) -> None:
    if "triton._C.libtriton" not in sys.modules or _EXIT not in config.stash:
        return
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(config.stash[_EXIT])
