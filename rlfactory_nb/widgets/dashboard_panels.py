"""The dashboard's panels as plain data: which metric keys each draws, their short legend names,
and the axis each is fitted to (`axis_range`). Pure functions over metrics rows, shared by the live
TrainingDashboard (plotly) and its static twin (`panel_chart`, widgets/static.py's SVG).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.widgets.static import Chart, Series, nice_ticks


@dataclass(frozen=True)
class Panel:
    title: str
    keys: tuple[str, ...]
    """metric keys drawn as lines; a key ending in "/" draws every key with that prefix"""
    stacked: bool = False
    empty_note: str = "no data yet"
    title_without: tuple[str, str] | None = None
    """(key, title): the title while the panel draws other keys but never `key`"""
    lines: tuple[str, ...] = ()
    """keys drawn as lines over a stacked panel's bars"""
    asynchronous: bool = False
    """only an asynchronous run (grpo.max_staleness > 0) writes its keys"""

    @property
    def legend(self) -> bool:
        """Whether the panel names its series: it may draw more than one."""
        return len(self.keys) + len(self.lines) > 1 or self.keys[0].endswith("/")

    def note(self, config: Any = None) -> str:
        """What the panel says while it draws nothing: why, when the run's config tells."""
        grpo = getattr(config, "grpo", None)
        if self.asynchronous and grpo is not None and not grpo.max_staleness:
            return "synchronous run (grpo.max_staleness = 0): no asynchrony"
        return self.empty_note


PANELS = (
    Panel(  # an SFT job (cluster/job_kinds.py) writes no reward: its loss takes the first panel
        "reward", ("reward/mean", "reward/", "eval/sampled_reward/mean", "eval/greedy_reward/mean", "sft/loss"),
        title_without=("reward/mean", "SFT loss (NLL of the trained tokens)"),
    ),
    Panel("KL and entropy", ("train/kl", "train/entropy"), title_without=("train/kl", "entropy (KL off: grpo.kl_coef = 0)")),
    Panel("response length (tokens)", ("rollout/response_tokens_mean",)),
    Panel("tool use (share)", ("rollout/tool_call_rate", "tools/success_rate")),
    Panel("parse errors (per step)", ("rollout/parse_errors",)),
    Panel(
        "step time (s)", ("time/rollout_s", "time/reward_s", "time/update_s", "time/sync_s"), stacked=True,
        lines=("time/wait_rollouts_s",),
    ),
    Panel("learning rate", ("train/lr", "sft/lr")),
    Panel("staleness (steps)", ("async/staleness_mean", "async/staleness_max"), asynchronous=True),
    Panel("busy (share of time)", ("async/engine_busy_share", "async/trainer_busy_share"), asynchronous=True),
)

_EXCLUDED = ("reward/std", "reward/calls", "reward/failures")
LABELS = {
    "reward/mean": "mean",
    "eval/sampled_reward/mean": "eval sampled",
    "eval/greedy_reward/mean": "eval greedy",
    "train/kl": "KL",
    "rollout/tool_call_rate": "tool-call rate",
    "tools/success_rate": "tool success",
    "async/staleness_mean": "mean",
    "async/staleness_max": "max",
    "async/engine_busy_share": "engines",
    "async/trainer_busy_share": "trainer",
    "time/wait_rollouts_s": "waiting",
}


def label(key: str) -> str:
    """A series' short legend name (a panel is about a third of the width, and its legend must fit
    under it): "time/update_s" -> "update", "reward/em" -> "em", "reward/shaped/correct" -> "correct"."""
    if key in LABELS:
        return LABELS[key]
    return key.rsplit("/", 1)[-1].removesuffix("_s")


def derived(row: dict[str, Any]) -> dict[str, Any]:
    """A row with the values the panels need that the trainer does not write (tool success rate)."""
    calls = row.get("tools/calls")
    if calls:
        return {**row, "tools/success_rate": row.get("tools/status/ok", 0) / calls}
    return row


def panel_series(panel: Panel, rows: list[dict[str, Any]]) -> dict[str, tuple[list[int], list[float]]]:
    """key -> (steps, values) for every key of `panel` that some row has."""
    rows = [derived(row) for row in rows]
    present = sorted({key for row in rows for key in row})
    keys: list[str] = []
    for wanted in (*panel.keys, *panel.lines):
        matches = [k for k in present if k.startswith(wanted)] if wanted.endswith("/") else [wanted]
        keys += [k for k in matches if k not in keys and k not in _EXCLUDED]
    series = {}
    for key in keys:
        points = [(int(row["step"]), float(row[key])) for row in rows if isinstance(row.get(key), (int, float))]
        if points:
            series[key] = ([p[0] for p in points], [p[1] for p in points])
    return series


def panel_title(panel: Panel, series: dict[str, Any]) -> str:
    """What the panel is called, given the series it draws: the KL panel of a run without KL says so.

    >>> kl, point = PANELS[1], ([1], [0.5])
    >>> panel_title(kl, {"train/entropy": point}), panel_title(kl, {"train/kl": point, "train/entropy": point})
    ('entropy (KL off: grpo.kl_coef = 0)', 'KL and entropy')
    >>> panel_title(kl, {})  # nothing drawn yet: the panel says "no data yet"
    'KL and entropy'
    """
    if panel.title_without is not None and series and panel.title_without[0] not in series:
        return panel.title_without[1]
    return panel.title


def panel_chart(panel: Panel, rows: list[dict[str, Any]], config: Any = None) -> Chart:
    """The static twin of one live panel (`config`: the run's, for what the panel says when empty)."""
    drawn = panel_series(panel, rows)
    names = series_names(drawn)
    series = tuple(
        Series(names[key], tuple(steps), tuple(values), series_kind(panel, key), dash=key in covered(drawn))
        for key, (steps, values) in drawn.items()
    )
    title = panel_title(panel, drawn)
    return Chart(
        title, series, barmode="stack", x_title="step", integer_x=True, y_range=axis_range(panel, drawn),
        empty_note=panel.note(config), legend=panel.legend,
    )


def series_kind(panel: Panel, key: str) -> str:
    """How `key` is drawn on `panel`: a stacked panel's bars, except its `lines`."""
    return "bar" if panel.stacked and key not in panel.lines else "line"


def covered(series: dict[str, tuple[list[int], list[float]]]) -> dict[str, str]:
    """key -> the earlier key it would be drawn exactly over (same steps, same values): such a line
    is dashed so that both show. A reward with one component: "mean" equals "shaped"."""
    found: dict[str, str] = {}
    keys = list(series)
    for index, key in enumerate(keys):
        same = next((other for other in keys[:index] if series[other] == series[key]), None)
        if same is not None:
            found[key] = same
    return found


def series_names(series: dict[str, tuple[list[int], list[float]]]) -> dict[str, str]:
    """Legend names: the short label; a line that covers others names them ("mean = shaped"), and
    the covered ones get no legend entry of their own ("": drawn dashed, named by the first)."""
    over = covered(series)
    names = {key: "" if key in over else label(key) for key in series}
    for key, first in over.items():
        names[first] = f"{names[first]} = {label(key)}"
    return names


def axis_range(panel: Panel, series: dict[str, tuple[list[int], list[float]]]) -> tuple[float, float] | None:
    """The y range that fits `series` (stacked bars by their totals): from 0 when no value is below
    it, so a constant 3e-4 learning rate reads as 3e-4 and a count never dips below 0; None: nothing
    to fit.

    >>> axis_range(PANELS[6], {"train/lr": ([1, 2], [3e-4, 3e-4])})
    (0.0, 0.000324)
    >>> axis_range(PANELS[4], {"rollout/parse_errors": ([1], [0.0])})
    (0.0, 1.08)
    """
    values = [v for key, (_, ys) in series.items() if series_kind(panel, key) == "line" for v in ys if math.isfinite(v)]
    totals: dict[int, float] = {}
    for key, (steps, ys) in series.items():
        if series_kind(panel, key) == "bar":
            for step, value in zip(steps, ys):
                totals[step] = totals.get(step, 0.0) + value
    values += [v for v in totals.values() if math.isfinite(v)]
    if not values:
        return None
    low, high = min(values), max(values)
    low = min(low, 0.0) if low >= 0 else low
    if high <= low:
        high = low + (abs(low) or 1.0)
    pad = (high - low) * 0.08
    return (round(low - (pad if low < 0 else 0.0), 12), round(high + pad, 12))


def step_tick(last_step: int, target: int = 6) -> int:
    """The distance between step-axis ticks: a whole number of steps, about `target` ticks.

    >>> [step_tick(n) for n in (1, 2, 8, 30, 200)]
    [1, 1, 2, 5, 50]
    """
    ticks = nice_ticks(0, max(last_step, 1), target, integer=True)
    return ticks[1] - ticks[0] if len(ticks) > 1 else 1
