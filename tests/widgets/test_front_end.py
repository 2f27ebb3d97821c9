"""A headless run (papermill) makes light figures and shows views as static HTML; a front-end gets them live."""

import IPython
import ipywidgets
import pytest

from rlfactory_nb.widgets._base import WIDGET_VIEW, StaticVBox
from rlfactory_nb.widgets.front_end import STAND_IN_ESM, figure_widget, headless


class Kernel:
    def __init__(self, msg_type, allow_stdin):
        self.request = {"header": {"msg_type": msg_type}, "content": {"allow_stdin": allow_stdin}}

    def get_parent(self):
        return self.request


def run_by(monkeypatch, msg_type, allow_stdin=False):
    shell = type("Shell", (), {"kernel": Kernel(msg_type, allow_stdin)})()
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)


def view():
    return StaticVBox([figure_widget(layout={"title": "scores"})], "<p>static scores</p>")


def test_outside_a_kernel_figures_are_plotlys_own():
    assert not headless()
    assert len(figure_widget()._esm) > 1_000_000  # plotly's widget bundle


def test_a_headless_run_makes_light_figures_and_shows_the_static_html(monkeypatch):
    run_by(monkeypatch, "execute_request", allow_stdin=False)  # what nbclient (papermill) sends
    assert headless()
    figure = figure_widget(layout={"title": "scores"})
    assert figure._esm == STAND_IN_ESM and figure.layout.title.text == "scores"
    figure.add_bar(x=[1, 2], y=[3, 4])  # still a plotly figure to draw on
    bundle = view()._repr_mimebundle_()
    assert WIDGET_VIEW not in bundle and bundle["text/html"] == "<p>static scores</p>"


@pytest.mark.parametrize(("msg_type", "allow_stdin"), [("execute_request", True), ("comm_msg", False)])
def test_a_front_end_gets_live_widgets(monkeypatch, msg_type, allow_stdin):
    """JupyterLab runs cells with allow_stdin true; a button click arrives as a comm message."""
    run_by(monkeypatch, msg_type, allow_stdin)
    assert not headless()
    shown = view()
    assert len(shown.children[0]._esm) > 1_000_000
    assert {WIDGET_VIEW, "text/html"} <= shown._repr_mimebundle_().keys()
    assert isinstance(shown, ipywidgets.VBox)
