"""A table that fits the terminal, or a long form that never cuts a cell.

Rich shrinks a table wider than the console by cutting its cells (`var…`), and a pipe or a narrow
terminal is 80 columns. `print_table` draws the table when its natural width fits; otherwise each
row becomes a block, its first cell as a heading and every other cell as `header: value`, which wraps
instead of being cut.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

BORDER = 3  # a cell's padding and its border: `│ x ` in rich's default box


def natural_width(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> int:
    """Columns a table needs to show every header and cell on one line (cells may hold rich markup)."""
    widths = [Text.from_markup(h).cell_len for h in headers]
    for row in rows:
        widths = [max(w, Text.from_markup(str(c)).cell_len) for w, c in zip(widths, row, strict=False)]
    return sum(widths) + BORDER * len(widths) + 1


def print_table(out: Console, title: str | None, headers: Sequence[str], rows: Sequence[Sequence[str]],
                keys: int = 1) -> None:
    """The table where it fits `out`'s width, else the long form (the first `keys` cells head each row)."""
    if natural_width(headers, rows) <= out.width:
        table = Table(title=title)
        for header in headers:
            table.add_column(header)
        for row in rows:
            table.add_row(*row)
        out.print(table)
        return
    if title:
        out.print(f"[bold]{title}[/]")
    for row in rows:
        cells = [f"{h}: {c}" for h, c in zip(headers[keys:], row[keys:], strict=False) if c not in ("", "-")]
        out.print(" ".join(map(str, row[:keys])) + (f": {'; '.join(cells)}" if cells else ""))
