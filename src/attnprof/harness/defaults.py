"""Defaults of the measuring harness, defined once: the CLI, the Python API and the runner read them here."""

from __future__ import annotations

REGION = "attn_fwd"  # the record_function name around each forward (the article's)
STEP_REGION = "attn_step"  # ... and around each training step (--mode train)
REPEATS = 30  # timed blocks per measurement, at least (measure.autorange takes more while the spread is wide)
MIN_TIME_S = 0.1  # timed work per measurement, at least
CPU_THREADS = 1  # torch's intra-op threads for a CPU run (as torch.utils.benchmark times), recorded with it
WARMUP = 3  # untimed calls before any timing
SCHEDULE = (1, 1, 3)  # torch.profiler wait, warmup, active steps (the article's)
OUT_DIR = "attnprof-out"  # each run makes a new folder under this one
