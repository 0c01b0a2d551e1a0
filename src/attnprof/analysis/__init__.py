"""Attribution of GPU work to regions by launch correlation, queries over it, and diffs. No torch."""
