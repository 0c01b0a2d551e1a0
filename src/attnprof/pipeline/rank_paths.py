"""Which files are the ranks of one job: the traces named, a folder's, a glob's, an fsspec URL's; an
`attnprof run` folder told apart. Imports no analysis (nor NumPy): a Dask driver finds the traces and sends
them to its workers before it would have imported the analysis (pipeline.cluster)."""

from __future__ import annotations

import glob
from pathlib import Path

from attnprof.contracts import CP_RUN, RESULTS, RUN, read_json
from attnprof.errors import UserError

TRACE_SUFFIXES = (".json", ".json.gz")
VARIANTS_SHOWN = 8  # variant names an error lists


def trace_paths(inputs: list[str | Path]) -> list[Path | str]:
    """The trace files named, a folder standing for the traces directly in it (sorted), a glob for the
    files it matches (sorted); an fsspec URL (`s3://bucket/job/`, `gs://.../*.json.gz`) the same way,
    kept as a URL for the workers to read where it lies."""
    found: list[Path | str] = []
    for item in inputs:
        if "://" in str(item) and not str(item).startswith("file://"):
            found += _urls(str(item))
            continue
        item = Path(str(item).removeprefix("file://"))
        if item.is_dir():
            inside = sorted(p for p in item.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
            if not inside:
                raise UserError(f"{item}: no .json or .json.gz traces in this folder")
            found += rank_traces(item, inside)
        elif item.exists():
            found.append(item)
        elif glob.has_magic(str(item)):
            matched = sorted(Path(p) for p in glob.glob(str(item)) if Path(p).is_file())
            if not matched:
                raise UserError(f"{item}: no file matches")
            found += matched
        else:
            raise UserError(f"{item}: no such file or folder")
    return list(dict.fromkeys(found))


def rank_traces(folder: Path, traces: list[Path]) -> list[Path]:
    """The traces of `folder` that are ranks: all of a plain folder; those of a `run --nproc` folder of one
    variant, less its results.json. A UserError for an `attnprof run` folder (its results.json says so): its
    traces are the variants of one run, which analysed as the ranks of one job would be compared as ranks;
    and for a `run --nproc` folder whose rank traces are of several variants."""
    try:
        results = read_json(folder / RESULTS)
    except (OSError, ValueError):
        return traces  # a plain folder of traces
    schema = results.get("schema") if isinstance(results, dict) else None
    if not (isinstance(schema, str) and schema.startswith("attnprof.")):
        return traces
    traces = [t for t in traces if t.name != RESULTS]
    listed = results.get("variants")
    names = [str(v.get("name")) for v in listed if isinstance(v, dict)] if isinstance(listed, list) else []
    if schema == RUN or (schema == CP_RUN and len(names) > 1):
        shown = ", ".join(names[:VARIANTS_SHOWN]) + (f" and {len(names) - VARIANTS_SHOWN} more"
                                                     if len(names) > VARIANTS_SHOWN else "")
        one = "one variant's trace" if schema == RUN else "one variant's rank traces"
        raise UserError(f"{folder}: the folder of one `attnprof run` ({len(traces)} traces of the variants {shown}), "
                        f"not the ranks of one job: `attnprof analyze` takes {one} (`attnprof analyze "
                        f"{folder}/<trace>`), `attnprof report {folder}` shows the run, `attnprof diff "
                        f"{folder}:A {folder}:B` compares two variants")
    return traces


def _urls(url: str) -> list[str]:
    """The traces an fsspec URL names: a folder's traces, a glob's matches, or the file itself."""
    try:
        import fsspec
    except ImportError:
        raise UserError(f"{url}: reading a URL needs fsspec (pip install fsspec)") from None
    try:
        fs, root = fsspec.core.url_to_fs(url)
        if glob.has_magic(root):
            names = fs.glob(root)
        elif fs.isdir(root):
            names = [n for n in fs.ls(root, detail=False) if n.endswith(TRACE_SUFFIXES)]
        else:
            names = [root] if fs.exists(root) else []
    except (OSError, ValueError, ImportError) as e:
        raise UserError(f"{url}: cannot list ({e})") from None
    if not names:
        raise UserError(f"{url}: no .json or .json.gz traces there")
    return [fs.unstrip_protocol(n) for n in sorted(names)]
