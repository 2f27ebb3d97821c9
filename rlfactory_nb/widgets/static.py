"""Static plots for saved notebooks: a small SVG renderer for finished line and bar charts.

A plotly `FigureWidget` keeps its plots live in the kernel, but its saved state carries the whole
plotly.js bundle (about 5 MB a figure) and its HTML export needs the network to draw. A saved
notebook shows this module's SVG instead: plain markup, no script, a few kilobytes a chart, drawn the
same with the network off. It covers what our views plot (lines, markers, grouped, stacked and
overlaid bars, histograms), not plotly at large; `charts_from_figure` reads a single-plot figure.

    >>> svg = svg_chart(Chart("reward", (Series("mean", (1, 2), (0.2, 0.4)),), integer_x=True))
    >>> svg.startswith("<svg") and "reward" in svg
    True
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

COLORS = ("#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3", "#ff6692", "#b6e880", "#ff97ff", "#fecb52")
"""plotly's default colour sequence, so a static chart matches its live figure"""
CHAR_WIDTH = 6.2
"""approximate width of one 10px sans-serif character, for laying out legends"""


@dataclass(frozen=True)
class Series:
    name: str
    x: tuple[Any, ...]
    """numbers, or category names (strings)"""
    y: tuple[float, ...]
    kind: str = "line"
    """"line" (with markers), "markers" or "bar\""""
    bar_width: float | None = None
    """a numeric bar's width in x units (histogram bins); None: from the spacing of the x values"""
    dash: bool = False
    """a dashed line: one drawn exactly over another, so that both show"""


@dataclass(frozen=True)
class Chart:
    title: str
    series: tuple[Series, ...]
    barmode: str = "group"
    """how bars of several series share an x: "group", "stack" or "overlay" (plotly's names)"""
    x_title: str = ""
    integer_x: bool = False
    """ticks on whole numbers only (training steps)"""
    y_range: tuple[float, float] | None = None
    empty_note: str = "no data yet"
    legend: bool | None = None
    """None: a legend when there are two series or more"""


def nice_ticks(low: float, high: float, target: int = 5, integer: bool = False) -> list[float]:
    """Round tick values covering [low, high]: steps of 1, 2 or 5 times a power of ten.

    >>> nice_ticks(0, 1)
    [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    >>> nice_ticks(1, 2, integer=True)
    [1, 2]
    >>> nice_ticks(1, 30, integer=True)
    [0, 10, 20, 30]
    """
    if high < low:
        low, high = high, low
    if high == low:
        if integer:
            return [int(low)]
        pad = abs(high) * 0.1 or 1.0  # a constant learning rate of 3e-4 still shows its value
        low, high = low - pad, high + pad
    raw = (high - low) / max(target, 1)
    step = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= factor * step * 1.0001:
            step *= factor
            break
    if integer:
        step = max(1, round(step))
    first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
    ticks = [index * step for index in range(first, last + 1)]
    return [int(t) for t in ticks] if integer else [round(t, 12) for t in ticks]


def format_tick(value: float) -> str:
    """A tick label: nice tick values need no more than six significant digits.

    >>> [format_tick(v) for v in (0.0, 2.0, 0.25, 1e-4, 5e-5, 12000.0)]
    ['0', '2', '0.25', '0.0001', '5e-05', '12000']
    """
    return f"{value:.6g}" if value != 0 else "0"


def svg_chart(chart: Chart, width: int = 380, height: int = 230) -> str:
    """One chart as an inline SVG element: axes, ticks, the series and a legend of its own below."""
    legend_rows = _legend_rows(chart, width)
    left, right, top, bottom = 52, 12, 24, 34 + (14 if chart.x_title else 0)
    plot_h = height - top - bottom
    total_h = height + 16 * len(legend_rows)
    parts = [
        (
            f'<svg class="rf-plot" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{total_h}" '
            f'viewBox="0 0 {width} {total_h}" role="img" aria-label="{_attr(chart.title)}" '
            'style="font-family:sans-serif;font-size:10px;background:#fff">'
        ),
        f"<title>{_text(chart.title)}</title>",
        f'<text x="{width / 2}" y="15" text-anchor="middle" font-size="12">{_text(chart.title)}</text>',
    ]
    frame = _Frame(left, top, width - left - right, plot_h)
    if not any(series.y for series in chart.series):
        parts.append(f'<text x="{frame.left + frame.width / 2}" y="{frame.top + plot_h / 2}" text-anchor="middle" fill="#888">{_text(chart.empty_note)}</text>')
    else:
        parts += _plot(chart, frame)
    if chart.x_title:
        parts.append(f'<text x="{frame.left + frame.width / 2}" y="{height - 6}" text-anchor="middle">{_text(chart.x_title)}</text>')
    for row, entries in enumerate(legend_rows):
        y = height + 16 * row + 4
        for x, name, color in entries:
            parts.append(f'<rect x="{x}" y="{y}" width="12" height="8" fill="{color}"/>')
            parts.append(f'<text x="{x + 16}" y="{y + 8}">{_text(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def charts_html(charts: list[Chart], width: int = 380, height: int = 230) -> str:
    """Charts side by side, wrapping like a grid."""
    cells = "".join(f'<div style="display:inline-block;vertical-align:top;margin:2px">{svg_chart(c, width, height)}</div>' for c in charts)
    return f'<div class="rf-plots">{cells}</div>'


def charts_from_figure(figure: Any) -> list[Chart]:
    """A single-plot plotly figure (scatter, bar, histogram traces) as one Chart."""
    layout = figure.layout
    series = []
    for trace in figure.data:
        if trace.type == "histogram":
            series += _histogram_series([t for t in figure.data if t.type == "histogram"], trace)
        elif trace.type == "bar":
            series.append(Series(trace.name or "", tuple(trace.x or ()), tuple(float(v) for v in trace.y or ()), "bar"))
        elif trace.type == "scatter":
            kind = "markers" if (trace.mode or "lines") == "markers" else "line"
            series.append(Series(trace.name or "", tuple(trace.x or range(len(trace.y or ()))), tuple(float(v) for v in trace.y or ()), kind))
    y_range = tuple(layout.yaxis.range) if layout.yaxis.range else None
    histograms = bool(series) and all(t.type == "histogram" for t in figure.data)
    barmode = layout.barmode or ("overlay" if histograms else "group")
    return [Chart(layout.title.text or "", tuple(series), barmode, layout.xaxis.title.text or "", y_range=y_range)]


def figure_svg_html(figure: Any) -> str:
    return charts_html(charts_from_figure(figure), width=560, height=260)


# ---------------------------------------------------------------------- drawing


@dataclass(frozen=True)
class _Frame:
    left: float
    top: float
    width: float
    height: float


def _plot(chart: Chart, frame: _Frame) -> list[str]:
    categories = _categories(chart)
    x_of, x_ticks, band = _x_axis(chart, categories, frame)
    bars = [s for s in chart.series if s.kind == "bar"]
    low, high = _y_extent(chart, bars)
    ticks = nice_ticks(low, high)
    if chart.y_range is None:
        low, high = min(ticks[0], low), max(ticks[-1], high)
    else:
        ticks = [t for t in ticks if low - 1e-12 <= t <= high + 1e-12]
    span = (high - low) or 1.0

    def y_of(value: float) -> float:
        return frame.top + frame.height * (1 - (value - low) / span)

    parts = [f'<rect x="{frame.left}" y="{frame.top}" width="{frame.width}" height="{frame.height}" fill="#f5f6fa"/>']
    for tick in ticks:
        y = y_of(tick)
        parts.append(f'<line x1="{frame.left}" x2="{frame.left + frame.width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#fff"/>')
        parts.append(f'<text x="{frame.left - 4}" y="{y + 3:.1f}" text-anchor="end">{format_tick(tick)}</text>')
    bottom = frame.top + frame.height
    for value, label in x_ticks:
        x = x_of(value)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{bottom}" y2="{bottom + 4}" stroke="#444"/>')
        parts.append(f'<text x="{x:.1f}" y="{bottom + 15}" text-anchor="middle">{_text(label)}</text>')
    parts += _bars(chart, bars, x_of, y_of, band)
    for index, series in enumerate(chart.series):
        if series.kind != "bar":
            parts += _line(series, _color(index), x_of, y_of)
    return parts


def _bars(chart: Chart, bars: list[Series], x_of: Any, y_of: Any, band: float) -> list[str]:
    parts = []
    stacked_top: dict[Any, float] = {}
    stacked_bottom: dict[Any, float] = {}
    for position, series in enumerate(bars):
        color = _color(chart.series.index(series))
        width = band * (series.bar_width or 1.0) * (0.8 if series.bar_width is None else 1.0)
        if chart.barmode == "group":
            width /= len(bars)
        for x, y in zip(series.x, series.y):
            base = 0.0
            if chart.barmode == "stack":
                store = stacked_top if y >= 0 else stacked_bottom
                base = store.get(x, 0.0)
                store[x] = base + y
            offset = (position - (len(bars) - 1) / 2) * width if chart.barmode == "group" else 0.0
            left = x_of(x) + offset - width / 2
            y_top, y_bottom = sorted((y_of(base + y), y_of(base)))
            opacity = ' fill-opacity="0.6"' if chart.barmode == "overlay" else ""
            parts.append(
                f'<rect x="{left:.1f}" y="{y_top:.1f}" width="{max(width, 1):.1f}" height="{max(y_bottom - y_top, 0.5):.1f}" '
                f'fill="{color}"{opacity}><title>{_text(series.name)} {_text(str(x))}: {y:.4g}</title></rect>'
            )
    return parts


def _line(series: Series, color: str, x_of: Any, y_of: Any) -> list[str]:
    points = [(x_of(x), y_of(y)) for x, y in zip(series.x, series.y) if y is not None and math.isfinite(y)]
    parts = []
    if series.kind == "line" and len(points) > 1:
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        dashes = ' stroke-dasharray="6 4"' if series.dash else ""
        parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{dashes}/>')
    for (x, y), (vx, vy) in zip(points, zip(series.x, series.y)):
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"><title>{_text(series.name)} {_text(str(vx))}: {vy:.4g}</title></circle>')
    return parts


def _categories(chart: Chart) -> list[str]:
    names: list[str] = []
    for series in chart.series:
        for x in series.x:
            if isinstance(x, str) and x not in names:
                names.append(x)
    return names


def _x_axis(chart: Chart, categories: list[str], frame: _Frame) -> tuple[Any, list[tuple[Any, str]], float]:
    """x -> pixel, the ticks (value, label), and the pixel width of one x unit's band for bars."""
    if categories:
        band = frame.width / len(categories)
        index = {name: i for i, name in enumerate(categories)}
        return (lambda x: frame.left + band * (index[x] + 0.5)), [(c, c) for c in categories], band
    values = sorted({float(x) for s in chart.series for x in s.x})
    if not values:
        values = [0.0]
    gaps = [b - a for a, b in pairwise(values) if b > a]
    bar_widths = [s.bar_width for s in chart.series if s.kind == "bar" and s.bar_width]
    unit = min(gaps + bar_widths) if gaps or bar_widths else 1.0
    has_bars = any(s.kind == "bar" for s in chart.series)
    pad = unit / 2 if has_bars or len(values) == 1 else (values[-1] - values[0]) * 0.04  # markers stay inside
    low, high = values[0] - pad, values[-1] + pad
    integer = chart.integer_x or all(float(v).is_integer() for v in values) and not bar_widths
    ticks = [t for t in nice_ticks(low, high, integer=integer) if low <= t <= high]
    span = (high - low) or 1.0
    scale = frame.width / span
    band = unit * scale if not bar_widths else scale
    return (lambda x: frame.left + (float(x) - low) * scale), [(t, format_tick(t)) for t in ticks], band


def _y_extent(chart: Chart, bars: list[Series]) -> tuple[float, float]:
    if chart.y_range is not None:
        return chart.y_range
    values = [y for s in chart.series if s.kind != "bar" for y in s.y if y is not None and math.isfinite(y)]
    if bars:
        values.append(0.0)
        if chart.barmode == "stack":
            totals: dict[Any, list[float]] = {}
            for series in bars:
                for x, y in zip(series.x, series.y):
                    totals.setdefault(x, [0.0, 0.0])[0 if y >= 0 else 1] += y
            values += [v for pair in totals.values() for v in pair]
        else:
            values += [y for s in bars for y in s.y]
    return (min(values), max(values)) if values else (0.0, 1.0)


def _histogram_series(traces: list[Any], trace: Any, bins: int = 12) -> list[Series]:
    """Histogram traces share bins over their combined range (as plotly overlays them)."""
    everything = [float(v) for t in traces for v in (t.x or ())]
    if not everything:
        return [Series(trace.name or "", (), (), "bar")]
    low, high = min(everything), max(everything)
    distinct = sorted(set(everything))
    if len(distinct) <= bins:
        unit = min([b - a for a, b in pairwise(distinct)] or [1.0])
        centers = distinct
    else:
        unit = (high - low) / bins
        centers = [low + unit * (i + 0.5) for i in range(bins)]
    counts = [0.0] * len(centers)
    for value in trace.x or ():
        nearest = min(range(len(centers)), key=lambda i: abs(centers[i] - float(value)))
        counts[nearest] += 1
    return [Series(trace.name or "", tuple(centers), tuple(counts), "bar", bar_width=unit * 0.9)]


def _legend_rows(chart: Chart, width: int) -> list[list[tuple[float, str, str]]]:
    """(x, name, colour) per legend entry, wrapped into rows; no legend for a single series."""
    if not (chart.legend if chart.legend is not None else len(chart.series) > 1):
        return []
    rows: list[list[tuple[float, str, str]]] = [[]]
    x = 8.0
    for index, series in enumerate(chart.series):
        if not series.name:  # drawn, but named by the series it lies on (a dashed twin)
            continue
        entry = 20 + CHAR_WIDTH * len(series.name) + 10
        if rows[-1] and x + entry > width:
            rows.append([])
            x = 8.0
        rows[-1].append((x, series.name, _color(index)))
        x += entry
    return rows


def _color(index: int) -> str:
    return COLORS[index % len(COLORS)]


def _text(value: str) -> str:
    return html.escape(value, quote=False)


def _attr(value: str) -> str:
    return html.escape(value, quote=True)
