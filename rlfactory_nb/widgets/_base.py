"""What every view shares: running a button's work without blocking the kernel, and a static snapshot.

A click handler is a plain function called by ipywidgets on the kernel's event loop. Work that is a
coroutine (a rollout turn, a tool call) must run on that same loop, because the ToolSet's server
sessions live there: it becomes a task, and the handler returns at once. Anything the work raises is
written into the view's Output area as one message (the error's own, which names the fix), never
swallowed by the comm machinery; the traceback goes to the log (`logging`, at debug level).

`StaticFallback` gives every view an HTML rendering too, for notebooks saved without widget state:
plots in it are static SVG (widgets/static.py), so a saved notebook needs neither plotly.js nor a
network to show them. In a headless run (papermill: widgets/front_end.py) it is the only rendering.
"""

from __future__ import annotations

import asyncio
import html
import inspect
import logging
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

import ipywidgets as widgets

from rlfactory_nb._async import run_sync
from rlfactory_nb.widgets.front_end import headless
from rlfactory_nb.widgets.static import figure_svg_html

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
log = logging.getLogger(__name__)


def error_area() -> widgets.Output:
    """The Output widget a view shows callback errors in."""
    return widgets.Output(layout=widgets.Layout(max_height="300px", overflow="auto"))


def report_error(area: widgets.Output, error: BaseException) -> None:
    """One message in the view; the traceback in the log, for whoever debugs the library."""
    log.debug("a view's action failed:\n%s", "".join(traceback.format_exception(type(error), error, error.__traceback__)))
    area.append_stderr(f"{type(error).__name__}: {error}\n")


def home_loop() -> asyncio.AbstractEventLoop | None:
    """The loop a view is created on (the kernel's, in a notebook cell); None outside any loop."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def run_callback(
    area: widgets.Output,
    work: Callable[[], Any],
    done: Callable[[Any], None] | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
) -> Any:
    """Run `work()`; when it returns an awaitable, await it on the running loop (as a task) or, with no
    loop running, to completion here. `done(result)` runs after success; errors go to `area`."""
    try:
        result = work()
    except Exception as error:  # noqa: BLE001  (shown to the user in the view)
        report_error(area, error)
        return None
    if not inspect.isawaitable(result):
        return _finish(area, result, done)
    current = home_loop()
    if loop is not None and loop.is_running() and loop is not current:
        # ipykernel 7 may deliver widget messages off the kernel's loop; the work must run on the
        # loop that owns the tool sessions and the engine, where the view was created.
        future = asyncio.run_coroutine_threadsafe(_as_coroutine(result), loop)
        future.add_done_callback(lambda finished: _settle(area, finished, done))
        return future
    loop = current
    if loop is None:
        try:
            return _finish(area, run_sync(_as_coroutine(result)), done)
        except Exception as error:  # noqa: BLE001
            report_error(area, error)
            return None
    task = loop.create_task(_as_coroutine(result))
    task.add_done_callback(lambda finished: _settle(area, finished, done))
    return task


def _finish(area: widgets.Output, result: Any, done: Callable[[Any], None] | None) -> Any:
    if done is not None:
        try:
            done(result)
        except Exception as error:  # noqa: BLE001
            report_error(area, error)
    return result


def _settle(area: widgets.Output, task: asyncio.Task, done: Callable[[Any], None] | None) -> None:
    if task.cancelled():
        area.append_stderr("cancelled\n")
    elif task.exception() is not None:
        report_error(area, task.exception())
    else:
        _finish(area, task.result(), done)


async def _as_coroutine(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


class StaticFallback:
    """Adds a static HTML rendering next to the live widget in a view's display data.

    JupyterLab shows the live widget; an executed notebook saved without widget state (nbconvert's
    HTML export, GitHub) shows the HTML instead of "VBox(children=...)". A headless run (papermill)
    displays the HTML alone, so the saved notebook never shows a widget whose figures it did not
    keep. The HTML is a snapshot taken when the view is displayed."""

    def static_html(self) -> str:
        raise NotImplementedError

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = super()._repr_mimebundle_(**kwargs)  # type: ignore[misc]
        try:
            bundle["text/html"] = self.static_html()
        except Exception as error:  # noqa: BLE001  (a snapshot must never break the live view)
            bundle["text/html"] = f"<pre>{html.escape(f'{type(error).__name__}: {error}')}</pre>"
        if headless():
            bundle.pop(WIDGET_VIEW, None)
        return bundle


def figure_html(figure: Any) -> str:
    """A finished single-plot plotly figure as static SVG (no script, drawn offline)."""

    return figure_svg_html(figure)


class StaticVBox(StaticFallback, widgets.VBox):
    """A VBox with a fixed static rendering (for views built from finished results)."""

    def __init__(self, children: list[Any], html: str):
        super().__init__(children)
        self._html = html

    def static_html(self) -> str:
        return self._html
