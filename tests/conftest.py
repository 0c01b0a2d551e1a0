"""Shared test setup: GPU-only tests carry the `cuda` marker and skip cleanly without a GPU."""

from __future__ import annotations

import pytest


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
