"""The args fields a producer writes in another form than Kineto's CUDA traces, and the fields dropped for
it. roctracer (ROCm) writes `args.stream` as "0x0" and `args.bytes` as "2560": numbers as text, read here as
the numbers they are; what still cannot be read is dropped, and counted by field and event, so that the
reader's warning says which field it lost and on how many events. Imports no torch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np

# the args (by their name in the trace) that attnprof reads as whole numbers
INT_FIELDS = frozenset({"correlation", "registers per thread", "shared memory", "bytes", "device", "stream"})
_EXAMPLE_CHARS = 40  # of a dropped value shown in the warning


def int_of_text(value: object) -> int | None:
    """A whole number written as text ("2560", "0x0", " 7 "), else None (a bool is not a number here)."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    try:
        return int(text, 16) if text[:2].lower() == "0x" else int(text, 10)
    except ValueError:
        return None


def text_or_int(value: int | str | None) -> int | str | None:
    """A field's value with a number written as text read as the number; any other text stays text (the
    caller drops it and says so)."""
    number = int_of_text(value)
    return value if number is None else number


class FieldLosses:
    """Which args fields were dropped, on how many events: counted per event (the lenient reader converts
    each event on its own), or per distinct set of args (the fast reader converts each set once: its
    events are counted from the args column when the trace is made, by the set's key)."""

    def __init__(self) -> None:
        self.events: Counter[str] = Counter()  # field -> events that lost it
        self.keys: dict[str, set] = {}  # field -> the keys of the arg sets that lost it
        self.examples: dict[str, str] = {}  # field -> one value dropped (shown as repr: inert)

    def lost(self, name: str, value: object, key: object = None) -> None:
        """Field `name` (value `value`) dropped from one event (`key` None) or from the arg set `key`."""
        self.examples.setdefault(name, repr(str(value)[:_EXAMPLE_CHARS]))
        if key is None:
            self.events[name] += 1
        else:
            self.keys.setdefault(name, set()).add(key)

    def merge(self, other: FieldLosses) -> None:
        """Another reader's losses (a range read by another process)."""
        self.events.update(other.events)
        for name, keys in other.keys.items():
            self.keys.setdefault(name, set()).update(keys)
        for name, example in other.examples.items():
            self.examples.setdefault(name, example)

    def warnings(self, arg_codes: dict, args_column: np.ndarray) -> list[str]:
        """One warning per field lost: its name, how many events, one value. `arg_codes`: each arg set's
        key -> its code in `args_column` (the events' args codes)."""
        counts = Counter(self.events)
        for name, keys in self.keys.items():
            counts[name] += _events_with(args_column, (arg_codes[k] for k in keys if k in arg_codes))
        return [f"dropped args field {name!r} of {n} event(s): not a value of the type attnprof reads "
                f"(e.g. {self.examples[name]})" for name, n in sorted(counts.items()) if n]


def _events_with(args_column: np.ndarray, codes: Iterable[int]) -> int:
    wanted = np.fromiter(codes, np.int64)
    return int(np.count_nonzero(np.isin(args_column, wanted))) if len(wanted) else 0
