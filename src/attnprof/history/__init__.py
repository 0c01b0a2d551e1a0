"""Run history (issue 16): every `run`, `sweep` and `lint` in one SQLite file, listed by
`attnprof history` and gated by `attnprof compare`, whose counts cannot be noise and whose times
move only beyond their spreads. store.py keeps the file, records.py says what a row holds,
environment.py what a run ran on, compare.py what each verdict means, export.py the CSV and JSONL."""

from attnprof.history.compare import DEFAULT_THRESHOLD, VERDICTS
from attnprof.history.query import compare_runs, history, record, recording_rank
from attnprof.history.store import HistoryError, default_path

__all__ = ["DEFAULT_THRESHOLD", "VERDICTS", "HistoryError", "compare_runs", "default_path", "history",
           "record", "recording_rank"]
