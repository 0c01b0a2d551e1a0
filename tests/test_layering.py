"""The import rules of the stage folders (README, Layout), read from every import statement in the source,
including the ones inside functions: every arrow points down (no circle, analysis imports no findings, the
CLI imports only the API, the options, report and the errors); and the torch-free half of attnprof run with
torch unimportable."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

from support import h200_trace

SRC = Path(__file__).parents[1] / "src" / "attnprof"
# Every stage (a folder, or a module at the top), lowest first: a stage imports only stages before it. A new
# stage fails test_every_stage_has_a_place_in_the_order until it is placed here.
STAGE_ORDER = ("version", "errors", "units", "files", "problem", "options", "contracts", "trace", "gpu", "analysis",
               "findings", "pipeline", "kernels", "variants", "harness", "fix", "history", "report", "api",
               "integrations", "cli", "__main__", "__init__")
TORCH_FREE = ("trace", "gpu", "analysis", "findings", "pipeline")
MAY_IMPORT_REPORT = ("cli", "api", "report")  # the views; api only so a result can show itself
MAY_IMPORT_CLI = ("cli", "__main__")
CLI_MAY_IMPORT = ("attnprof.cli", "attnprof.api", "attnprof.options", "attnprof.report", "attnprof.errors",
                  "attnprof.version")


def _stage(path: Path) -> str:
    """`trace` for src/attnprof/trace/reader.py, `pipeline` for src/attnprof/pipeline.py."""
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> list[str]:
    """Every module an import statement of `path` names, relative ones resolved."""
    package = ["attnprof", *path.relative_to(SRC).parent.parts]
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            names.append(module)
            if module == "attnprof":  # `from attnprof import report` names the package in the alias
                names += [f"attnprof.{a.name}" for a in node.names]
    return names


SOURCES = sorted(SRC.rglob("*.py"))


@functools.cache
def _all_imports() -> dict[Path, list[str]]:
    """Every source file's imports, parsed on first use: at the module's top, each pytest-xdist worker parsed
    all of src/ (~1.4 s) while collecting, though one worker runs these tests."""
    return {p: _imports(p) for p in SOURCES}


def _module(path: Path) -> str:
    """`attnprof.gpu.kernel_names` for src/attnprof/gpu/kernel_names.py, `attnprof.gpu` for its __init__."""
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in SOURCES}


def _module_arrows(path: Path) -> set[str]:
    """The attnprof modules `path` imports: `from attnprof.gpu import kernel_names` names the submodule,
    `from attnprof.gpu.kernel_names import decode` the module (a package's own __init__ is not implied)."""
    package = _module(path).split(".") if path.name == "__init__.py" else _module(path).split(".")[:-1]
    arrows = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            arrows |= {a.name for a in node.names if a.name in MODULES}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            for alias in node.names:
                name = f"{module}.{alias.name}"
                arrows |= {name} if name in MODULES else ({module} if module in MODULES else set())
    return arrows - {_module(path)}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each a circle of imports."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(node: str) -> None:
        order[node] = low[node] = len(order)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in order:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], order[nxt])
        if low[node] == order[node]:
            component = stack[stack.index(node):]
            del stack[stack.index(node):]
            if len(component) > 1:
                circles.append(sorted(component))

    for node in graph:
        if node not in order:
            visit(node)
    return circles


def _importers_of(prefix: str) -> set[str]:
    return {_stage(p) for p, names in _all_imports().items()
            if any(n == prefix or n.startswith(prefix + ".") for n in names)}


def test_the_source_has_stage_folders_and_few_top_level_modules():
    top = [p.stem for p in SRC.glob("*.py") if p.stem not in ("__init__", "__main__")]
    stages = [p.name for p in SRC.iterdir() if (p / "__init__.py").exists()]
    assert len(top) <= 8, top
    assert len(stages) >= 6, stages


def _stage_arrows() -> set[tuple[str, str]]:
    """(importer's stage, imported stage) for every import of one attnprof stage by another."""
    return {(_stage(p), n.split(".")[1]) for p, names in _all_imports().items() for n in names
            if n.startswith("attnprof.") and n.split(".")[1] != _stage(p)}


def test_every_stage_has_a_place_in_the_order():
    assert {_stage(p) for p in SOURCES} - set(STAGE_ORDER) == set()


def _upward(arrows: set[tuple[str, str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, b in arrows if STAGE_ORDER.index(b) > STAGE_ORDER.index(a))


def test_every_import_goes_down_the_stage_order():
    assert _upward(_stage_arrows()) == []


def test_the_order_check_finds_an_upward_arrow():
    assert _upward({("options", "harness"), ("harness", "options")}) == ["options -> harness"]


def test_report_and_history_read_result_files_through_contracts_never_harness():
    assert _importers_of("attnprof.harness") & {"report", "history"} == set()


def test_no_module_imports_another_modules_private_name():
    offenders = sorted(f"{p.relative_to(SRC)}: {node.module}.{a.name}" for p in SOURCES
                       for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
                       if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("attnprof.report")
                       for a in node.names if a.name.startswith("_"))
    assert not offenders, offenders


def test_the_analysis_side_never_imports_torch():
    offenders = sorted({f"{p.relative_to(SRC)}: {n}" for p, names in _all_imports().items() if _stage(p) in TORCH_FREE
                        for n in names if n == "torch" or n.startswith("torch.")})
    assert not offenders, offenders


def test_only_the_cli_imports_the_cli():
    assert _importers_of("attnprof.cli") <= set(MAY_IMPORT_CLI)


def test_nothing_below_report_imports_report():
    assert _importers_of("attnprof.report") <= set(MAY_IMPORT_REPORT)


def test_no_import_circles_anywhere():
    graph = {name: _module_arrows(path) for name, path in MODULES.items()}
    assert _circles(graph) == []


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_analysis_imports_no_findings():
    offenders = sorted(str(p.relative_to(SRC)) for p, names in _all_imports().items() if _stage(p) == "analysis"
                       and any(n == "attnprof.findings" or n.startswith("attnprof.findings.") for n in names))
    assert not offenders, offenders


def test_the_cli_imports_only_the_api_options_report_and_errors():
    offenders = sorted({f"{p.relative_to(SRC)}: {n}" for p, names in _all_imports().items() if _stage(p) == "cli"
                        for n in names if n.startswith("attnprof.") and not n.startswith(CLI_MAY_IMPORT)})
    assert not offenders, offenders


def test_no_source_file_is_over_400_lines():
    long = {str(p.relative_to(SRC)): n for p in SOURCES if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


@pytest.mark.parametrize("args", [["--help"], ["analyze", "--json", str(h200_trace("naive"))]])
def test_help_and_analyze_run_with_torch_unimportable(tmp_path, args):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('torch is not installed here')\n")
    code = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); from attnprof.cli import main; sys.exit(main())"
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()


def test_python_dash_m_attnprof_prints_help():
    proc = subprocess.run([sys.executable, "-m", "attnprof", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "usage: attnprof" in proc.stdout, proc.stderr


def test_the_old_module_paths_of_the_reader_and_attribution_still_import():
    from attnprof.analysis import analyze_trace, per_forward
    from attnprof.trace import load

    assert per_forward(analyze_trace(load(h200_trace("naive"))))["gpu_ops"] > 0
