"""How a plain object's `.view()` reaches its notebook view without the core importing widgets.

Views live in `rlfactory_nb.widgets`; each widget module registers the view it provides for a type
(`@register_view(Trajectory)`), and `rlfactory_nb.widgets.view_for(obj)` is the one dispatch. A core
method calls `view_of(self, ...)`, which loads the widgets package by name when a view is asked for.
So no core module imports a widget module (the import cycle types -> widgets/trajectory ->
rollout/display -> types is gone, and scripts never load ipywidgets), and a new view is one widget
module plus its registration.
"""

from __future__ import annotations

import importlib
from typing import Any

WIDGETS = "rlfactory_nb.widgets"


def view_of(obj: Any, **options: Any) -> Any:
    """The notebook view registered for `obj`'s type, built with `options`."""
    return importlib.import_module(WIDGETS).view_for(obj, **options)


# ---------------------------------------------------------------------- tables

CELL_CHARS = 60
"""a table cell shows at most this many characters; the whole text is its tooltip"""
TABLE_STYLE = (
    "<style>.rf-table{border-collapse:collapse;font-family:sans-serif;font-size:12px}"
    ".rf-table td,.rf-table th{padding:2px 8px;text-align:left;white-space:nowrap;border-bottom:1px solid #eee}"
    ".rf-table td.rf-num{text-align:right;font-variant-numeric:tabular-nums}.rf-better{color:#1b7f3b}"
    ".rf-worse{color:#b00020}.rf-table-count{color:#555;font-size:12px;font-family:sans-serif}</style>"
)


def cell_text(value: Any, places: int = 3) -> str:
    """A cell's text: a float to `places` places (never in scientific notation), the rest as str.

    >>> cell_text(0.9406250000000004), cell_text(3e-05, 6), cell_text("a")
    ('0.941', '0.000030', 'a')
    """
    if isinstance(value, float):
        return f"{value:.{places}f}"
    return str(value)


def html_table(
    columns: list[str], rows: list[list[Any]], what: str = "rows", height_px: int | None = 320, classes: list[list[str]] | None = None
) -> str:
    """An HTML table that reads at a glance: a count ("16 samples"), one line per row (a long cell is
    cut to CELL_CHARS with the whole text on hover), floats to 3 places, sans-serif. `classes`: a css
    class per cell (rf-better, rf-worse)."""
    import html

    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = []
    for r, row in enumerate(rows):
        cells = []
        for c, value in enumerate(row):
            text = cell_text(value)
            shown = text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"
            names = ["rf-num"] if isinstance(value, (int, float)) and not isinstance(value, bool) else []
            names += classes[r][c].split() if classes and classes[r][c] else []
            title = f" title='{html.escape(text, quote=True)}'" if shown != text else ""
            css = f" class='{' '.join(names)}'" if names else ""
            cells.append(f"<td{css}{title}>{html.escape(shown)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    count = f"<div class='rf-table-count'>{len(rows)} {html.escape(what)}</div>"
    scroll = f" style='max-height:{height_px}px;overflow:auto'" if height_px else ""
    return f"{TABLE_STYLE}{count}<div{scroll}><table class='rf-table'><tr>{head}</tr>{''.join(body)}</table></div>"
