"""attnprof.kernels loaded by file path, so the benchmarks need neither attnprof's dependencies nor an install."""

import importlib.util
from pathlib import Path

_path = Path(__file__).resolve().parents[2] / "src" / "attnprof" / "kernels" / "__init__.py"
_spec = importlib.util.spec_from_file_location("attnprof_kernels_by_path", _path)
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
load_flash_attn_triton = _module.load_flash_attn_triton
