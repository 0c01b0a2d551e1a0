"""attnprof's own attention kernels, each a folder in the Hugging Face kernels (kernel-builder) layout.

`flash_attn_triton/torch-ext/flash_attn_triton/` is the source; `flash_attn_triton/build/torch-cuda/`
(noarch CUDA, what `kernels` picks on a GPU machine) and `build/torch-universal/` (the legacy fallback,
what it picks on a CPU-only torch) are produced from it by `python -m attnprof.kernels.builder`, and a
test keeps them equal to it. `kernels.get_local_kernel(FLASH_ATTN_TRITON)` and
`LOCAL_KERNELS=<org>/<name>=<that folder>` load a build exactly as they load a hub kernel; without the
`kernels` package the source is imported straight from its folder.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

FLASH_ATTN_TRITON = Path(__file__).resolve().parent / "flash_attn_triton"
MODULE_NAME = "flash_attn_triton"


def source_package(kernel_dir: Path = FLASH_ATTN_TRITON) -> Path:
    """The kernel's Python package as kernel-builder keeps it: torch-ext/<module>/."""
    return kernel_dir / "torch-ext" / MODULE_NAME


def import_from_folder(kernel_dir: Path = FLASH_ATTN_TRITON, name: str = "_attnprof_flash_attn_triton") -> ModuleType:
    """The kernel's module imported from its source folder by path, as `kernels` imports a build, without
    `kernels` (the builds are byte copies of this source)."""
    if name in sys.modules:
        return sys.modules[name]
    package = source_package(kernel_dir)
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
