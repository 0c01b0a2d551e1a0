"""The `--json` view: the one place a machine-readable result is printed.

Apart from report.terminal so that a command printing JSON never imports rich (~2 MB resident, more
than a tenth of what analyzing a 50 MB trace holds) nor the text views."""

from __future__ import annotations

import json
import sys


def render_json(obj: object) -> None:
    """A `--json` result on stdout, indented by two. Written as it is encoded, not built as one string first:
    the result of a trace of unique names lists every kernel (14 MB), and the string would add ~48 MB to the
    CLI's peak (docs/lab/benchmarks.md, "The reader on unique names")."""
    json.dump(obj, sys.stdout, indent=2)
    sys.stdout.write("\n")
