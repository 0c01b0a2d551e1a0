"""Time attnprof as a user's install runs it: with its modules' bytecode written. pip compiles an installed
package's bytecode; an editable install under PYTHONDONTWRITEBYTECODE=1 (this project's development VMs and
CI set it) has none, so every fresh `attnprof` process compiled its ~90 modules from source first, ~0.1-0.15 s
of each start here (docs/benchmarks.md, "Where the bar stands (session 10 ...)"). compileall writes it
whatever that setting."""

from __future__ import annotations

import compileall
import importlib.util
from pathlib import Path


def attnprof_package() -> Path:
    """The folder of the attnprof package these benchmarks run."""
    return Path(importlib.util.find_spec("attnprof").origin).parent


def compile_attnprof() -> str:
    """Write the bytecode of attnprof's modules where Python looks for it; a line saying so, for the output."""
    package = attnprof_package()
    ok = compileall.compile_dir(str(package), quiet=2)
    return f"bytecode         {'written' if ok else 'NOT all written'} for {package} (as an installed package has it)"
