"""Views of evaluation results (`report.view()`, `report.compare(base).view()`): the summary and
per-prompt tables the report renders itself, and a bar chart of the headline rates."""

from __future__ import annotations

import ipywidgets as widgets
import plotly.graph_objects as go

from rlfactory_nb.eval import EvalComparison, EvalReport
from rlfactory_nb.widgets._base import StaticVBox, figure_html
from rlfactory_nb.widgets.front_end import figure_widget
from rlfactory_nb.widgets.registry import register_view

CHARTED = ("sampled_reward", "greedy_reward", "tool_call_rate", "tool_success_rate")


@register_view(EvalReport)
def report_view(report: EvalReport) -> StaticVBox:
    return _view(report._repr_html_(), [report])


@register_view(EvalComparison)
def comparison_view(comparison: EvalComparison) -> StaticVBox:
    return _view(comparison._repr_html_(), [comparison.base, comparison.new])


def summary_figure(reports: list[EvalReport]) -> go.FigureWidget:
    figure = figure_widget(layout={"barmode": "group", "height": 300, "title": "evaluation", "yaxis": {"range": [0, 1]}})
    for report in reports:
        figure.add_bar(x=list(CHARTED), y=[getattr(report, key) for key in CHARTED], name=report.label)
    return figure


def _view(text: str, reports: list[EvalReport]) -> StaticVBox:
    figure = summary_figure(reports)
    return StaticVBox([widgets.HTML(text), figure], text + figure_html(figure))
