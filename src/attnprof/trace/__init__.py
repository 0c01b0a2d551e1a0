"""Chrome traces of torch.profiler as typed columns: the reader (reader.py; its streaming cuts: stream.py,
its lenient path: lenient.py, big files in several processes: parallel.py), the columns, how they are
built and the Events made from their rows on demand (columns.py, builder.py and its growing.py, events.py, names.py).
Host-op nesting: analysis.nesting. No torch.

The reader's public names are re-exported here, so `from attnprof.trace import load` reads as it did
when the reader was the module `attnprof.trace`.
"""

from attnprof.trace.reader import (
    GPU_CATEGORIES,
    LAUNCH_CATEGORIES,
    Args,
    Event,
    Trace,
    TraceError,
    load,
    parse,
)
from attnprof.trace.source import DEFAULT_MAX_BYTES

__all__ = ["DEFAULT_MAX_BYTES", "GPU_CATEGORIES", "LAUNCH_CATEGORIES", "Args", "Event", "Trace", "TraceError",
           "load", "parse"]
