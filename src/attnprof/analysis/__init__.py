"""Attribution of GPU work to regions by launch correlation, queries over it, and diffs. No torch.

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
    kernel_table,
    per_forward,
)

__all__ = ["STEP_REGION", "Activity", "Analysis", "Forward", "analyze_trace", "default_region", "kernel_table",
           "per_forward"]
