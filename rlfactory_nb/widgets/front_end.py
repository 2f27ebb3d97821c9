"""Whether a front-end will draw this cell's widgets, and plotly figures that stay light when none will.

A plotly `FigureWidget` is an anywidget whose synced `_esm` trait is plotly's whole widget bundle
(about 5 MB of JavaScript). A headless executor (papermill, nbclient, `jupyter nbconvert --execute`)
saves every widget's state into the notebook, so one figure made the saved notebook 5 MB heavier,
however the notebook was run. The kernel can tell: those executors send each cell's
`execute_request` with `allow_stdin` false, while the front-ends that draw widgets (JupyterLab,
Notebook 7, VS Code) send it true. In such a run the views make their figures with a stand-in
script instead of the bundle, and show only their static HTML (SVG plots, widgets/static.py). In a
live front-end nothing changes: the same views, with plotly's own figures.

Voila executes with nbclient too (allow_stdin false): its dashboards show the static snapshots.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

STAND_IN_ESM = """\
export default {
  render({ el }) {
    el.textContent = "(a plot of a headless run: run the cell in JupyterLab to draw it live)";
  },
};
"""
"""the script a headless run's figures carry instead of plotly's bundle (no front-end runs it; a
notebook reopened from its saved widget state shows this line)"""


def headless() -> bool:
    """True when the cell running now was sent by a headless executor (see the module docstring).

    False outside a kernel, and in a widget callback (a front-end sent that message). A thread started
    by a cell answers for the kernel's latest request."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    kernel = getattr(get_ipython(), "kernel", None)
    if kernel is None:
        return False
    try:
        request = kernel.get_parent()
    except LookupError:  # no request handled yet
        return False
    return request.get("header", {}).get("msg_type") == "execute_request" and not request.get("content", {}).get("allow_stdin", True)


class _HeadlessFigure(go.FigureWidget):
    """A FigureWidget whose widget state holds STAND_IN_ESM instead of plotly's bundle."""

    _esm = STAND_IN_ESM


def figure_widget(*args: Any, **kwargs: Any) -> go.FigureWidget:
    """`go.FigureWidget(*args, **kwargs)`; in a headless run, one whose saved state stays small."""
    return (_HeadlessFigure if headless() else go.FigureWidget)(*args, **kwargs)
