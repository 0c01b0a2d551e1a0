"""Chrome traces of torch.profiler as typed events: the reader, its streaming parser, host-op nesting. No torch."""
