"""Plain-text tables as kubectl prints them, for kdra's command-line views (pure).

Invariants:
- Columns are as wide as their widest cell, separated by three spaces, trailing blanks cut.
- Every cell is shown through :func:`kdra.kube.core.printable.printable` (cells hold what the
  cluster says: names, selectors, product names), so no cell can move the cursor, recolour or
  retitle the terminal, or break the table into other lines; widths are those of the cells as
  shown.
- Colour is optional and never changes the layout: ``paint(column, cell)`` returns an ANSI
  SGR code (``"32"``, ``"1;31"``) or ``""``, applied after padding, so a coloured table lines
  up exactly like a plain one. Callers pass a painter only when writing to a terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kdra.kube.core.printable import printable

Painter = Callable[[str, str], str]
"""(column header, cell text) → ANSI SGR parameters, or "" for none."""

RESET = "\033[0m"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]],
          paint: Painter | None = None) -> str:
    """``headers`` and ``rows`` (cells as text) laid out in columns; no trailing newline."""
    shown = [[printable(cell) for cell in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in shown) for i in range(len(headers))]
    lines = []
    for number, row in enumerate(shown):
        cells = []
        for header, text, width in zip(headers, row, widths, strict=True):
            code = paint(header, text) if paint is not None and number else ""
            if number == 0 and paint is not None:
                code = "1"  # headers in bold
            padding = " " * (width - len(text))  # outside the codes: rstrip still trims it
            cells.append(f"\033[{code}m{text}{RESET}{padding}" if code else text + padding)
        lines.append("   ".join(cells).rstrip())
    return "\n".join(lines)
