"""attnprof's own attention kernels, each a folder in the Hugging Face kernels layout.

`flash_attn_triton/build/torch-universal/{metadata.json, flash_attn_triton/}` is what a hub repo
holds for a Python-only ("universal") kernel, so `kernels.get_local_kernel(FLASH_ATTN_TRITON)` and
`LOCAL_KERNELS=<org>/<name>=<that folder>` load it exactly as they load a hub kernel; without the
`kernels` package it is imported straight from its folder.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

FLASH_ATTN_TRITON = Path(__file__).resolve().parent / "flash_attn_triton"
BUILD_VARIANT = "torch-universal"
MODULE_NAME = "flash_attn_triton"


def import_from_folder(kernel_dir: Path = FLASH_ATTN_TRITON, name: str = "_attnprof_flash_attn_triton") -> ModuleType:
    """The kernel's module imported from its build folder by path, as `kernels` would, without `kernels`."""
    if name in sys.modules:
        return sys.modules[name]
    package = kernel_dir / "build" / BUILD_VARIANT / MODULE_NAME
    spec = importlib.util.spec_from_file_location(name, package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_flash_attn_triton() -> tuple[ModuleType, str]:
    """The kernel module and how it was loaded: through `kernels.get_local_kernel`, or from its folder."""
    try:
        import kernels
    except ImportError:
        return import_from_folder(), "imported from its folder (no `kernels` package)"
    return kernels.get_local_kernel(FLASH_ATTN_TRITON), "kernels.get_local_kernel"
