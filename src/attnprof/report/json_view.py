"""The `--json` view: the one place a machine-readable result is printed.

Apart from report.terminal so that a command printing JSON never imports rich (~2 MB resident, more
than a tenth of what analyzing a 50 MB trace holds) nor the text views."""

from __future__ import annotations

import json


def render_json(obj: object) -> None:
    """A `--json` result on stdout, indented by two."""
    print(json.dumps(obj, indent=2))
