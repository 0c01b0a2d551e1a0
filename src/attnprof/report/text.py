"""Text from outside made inert before a view shows it: kernel and op names from traces, paths, variant
names, torch's and the user's messages. Every view passes such text through here, so none of it is
ever read as rich markup (`[/]`, `[link=...]`, `pip install 'attnprof[hub]'` keeping its `[hub]`) nor
reaches the terminal as a control sequence (ESC[2J would clear the screen), and one name cannot fill
the screen. JSON output keeps the text whole; this is only what a person reads.
"""

from __future__ import annotations

import re

NAME_LIMIT = 200  # characters of one name on screen (a kernel's template name can run to thousands)
TEXT_LIMIT = 2000  # a message, a reason
# C0 controls but tab (newlines too: a name from a trace must not start a line of its own, which could pass
# for one of ours, "no findings"), DEL, C1 controls, the line and paragraph separators, and the
# bidirectional overrides that reorder a line
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: object, limit: int = TEXT_LIMIT) -> str:
    """`text` on one line, each control character written out as its escape (`\\x1b`, `\\n`), cut to `limit`
    characters."""
    shown = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def safe_text(text: object, limit: int = NAME_LIMIT) -> str:
    """`printable` text for a rich markup string or table cell: it prints exactly as written."""
    from rich.markup import escape  # here: `printable` alone (warnings, errors, --json runs) needs no rich

    return escape(printable(text, limit))
