"""Chrome traces of torch.profiler as typed columns, one model for every producer (CUDA and ROCm, Kineto's
2021 schema and today's): the reader (reader.py; its decoded types: wire.py, its sink: sink.py, its streaming
cuts: stream.py, its lenient path: lenient.py and the fields it drops: fields.py, big files in several
processes: parallel.py; ids from flows: flows.py, ROCm's launch geometry: launch_args.py), the columns, how they are
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
