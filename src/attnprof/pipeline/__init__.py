"""From traces to the facts other tools read, one module per way in: `one_trace` (a trace -> Analysis ->
findings -> the `attnprof.analysis/1` dict, for analyze, run, lint and diff), `ranks` (several ranks' traces
in a local process pool, and their merge), `cluster` (the same on Dask distributed), `rank_paths` (which files
are the ranks), `memory` (what the analysis may hold). Nothing is imported here: a Dask driver imports
`cluster` without the analysis its workers run."""
