"""The static SVG renderer: tick placement, geometry on hand-computed cases, plotly figures read back."""

import re

import plotly.graph_objects as go

from rlfactory_nb.widgets.static import Chart, Series, charts_from_figure, nice_ticks, svg_chart


def rects(svg):
    """(x, y, width, height) of every bar (the plot's background rect excluded)."""
    found = re.findall(r'<rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)" fill="#(?!f5f6fa)', svg)
    return [tuple(float(v) for v in match) for match in found]


def test_nice_ticks_cover_the_range_in_round_steps():
    assert nice_ticks(0, 1) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(-0.7, 1.3) == [-1.0, -0.5, 0.0, 0.5, 1.0, 1.5]
    assert nice_ticks(1, 2, integer=True) == [1, 2]  # never 1.5 on a step axis
    assert nice_ticks(3, 3, integer=True) == [3]
    assert nice_ticks(0, 2e-4) == [0.0, 5e-05, 0.0001, 0.00015, 0.0002]
    constant = nice_ticks(3e-4, 3e-4)  # a constant learning rate: ticks around its value, not around 0
    assert constant[0] < 3e-4 < constant[-1] and constant[-1] - constant[0] < 1e-3


def test_a_line_lands_where_the_axes_say():
    # frame: x from 52 to 368 px (380 wide, margins 52 and 12); y from 24 (value 1) to 196 px (value 0).
    # x spans 1..2 padded by 4% of the span: [0.96, 2.04], 316 px / 1.08 = 292.59 px a step.
    svg = svg_chart(Chart("c", (Series("s", (1, 2), (0.0, 1.0)),)), width=380, height=230)
    assert '<polyline points="63.7,196.0 356.3,24.0"' in svg
    assert [t for t in re.findall(r">([\d.]+)</text>", svg)][-2:] == ["1", "2"]  # whole-step x ticks only


def test_stacked_bars_rest_on_each_other():
    chart = Chart("t", (Series("a", (1, 2), (1.0, 2.0), "bar"), Series("b", (1, 2), (1.0, 1.0), "bar")), barmode="stack")
    bars = rects(svg_chart(chart))
    a1, a2, b1, b2 = bars[:4]
    assert abs((b1[1] + b1[3]) - a1[1]) < 0.2 and abs((b2[1] + b2[3]) - a2[1]) < 0.2  # b's bottom is a's top
    assert abs(b2[1] - 24) < 0.2  # the tallest stack (3) reaches the top tick (3)


def test_categories_groups_legend_and_escaping():
    chart = Chart("eval <1>", (Series("base", ("x", "y"), (0.1, 0.2), "bar"), Series("trained", ("x", "y"), (0.3, 0.4), "bar")))
    svg = svg_chart(chart)
    assert "eval &lt;1&gt;" in svg and "<script" not in svg
    assert ">x</text>" in svg and ">trained</text>" in svg  # category ticks and a legend of its own
    bars = rects(svg)
    assert bars[0][0] < bars[2][0] and bars[0][1] > bars[2][1]  # grouped side by side, trained taller
    single = svg_chart(Chart("one", (Series("only", (1,), (1.0,)),)))
    assert ">only</text>" not in single  # one series: the title says it, no legend


def test_an_empty_chart_says_why():
    assert "no asynchrony" in svg_chart(Chart("asynchrony", (), empty_note="no asynchrony"))


def test_plotly_figures_read_back():
    histogram = go.Figure(layout={"title": "scores", "barmode": "overlay"})
    histogram.add_histogram(x=[0, 0, 1], name="em")
    (chart,) = charts_from_figure(histogram)
    assert chart.title == "scores" and chart.barmode == "overlay"
    assert chart.series[0].x == (0.0, 1.0) and chart.series[0].y == (2.0, 1.0)

    scatter = go.Figure(layout={"xaxis": {"title": "prompt"}, "yaxis": {"range": [0, 1]}})
    scatter.add_scatter(x=[0, 1], y=[0.5, 0.25], mode="markers", name="advantage")
    (chart,) = charts_from_figure(scatter)
    assert chart.series[0].kind == "markers" and chart.x_title == "prompt" and chart.y_range == (0, 1)
