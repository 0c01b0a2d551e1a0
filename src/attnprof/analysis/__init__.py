"""Attribution of GPU work to regions by launch correlation, queries over it, and diffs. No torch.

The engine works on the trace's columns: join (launch to GPU work by correlation, launch to region),
nesting (the one op-nesting engine: parents and enclosing ops as array queries), rows (host ops kept as
rows, made into events only when a rule asks), activities (GPU work kept as rows, with the columns the
rules that look at all of it read), regions (which annotation is a forward, its instances), queries (what
the rules ask, built once per analysis), kernel_summary (the result's kernel table, bounded).

Attribution's public names are re-exported here, so `from attnprof.analysis import analyze_trace`
reads as it did when attribution was the module `attnprof.analysis`.
"""

from attnprof.analysis.attribution import (
    STEP_REGION,
    Activity,
    Analysis,
    Forward,
    analyze_trace,
    default_region,
    per_forward,
)
from attnprof.analysis.kernel_summary import kernel_table

__all__ = ["STEP_REGION", "Activity", "Analysis", "Forward", "analyze_trace", "default_region", "kernel_table",
           "per_forward"]
