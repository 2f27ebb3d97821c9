"""TrainingDashboard (`job.dashboard()`): a run's curves while it trains, and its saved rollouts.

Curves come from `job.metrics()` (the rows of runs/<name>/metrics.jsonl): reward and its components
with the held-out evals, KL and entropy, response length, tool use, parse errors, each step's time
split into rollout / reward / update / sync, the learning rate (`grpo.lr_schedule`), and an
asynchronous run's staleness and busy shares. Each panel has a legend of its own with short names;
step axes tick on whole steps. A daemon thread refreshes every `refresh_s` seconds until the job
ends; a thread rather than an asyncio task so that refreshing goes on while a cell blocks in
`job.wait()`. The rollout selector lists the run's saved trajectories, newest step first, and shows
the chosen one (or a RolloutStepper on the job's current weights, where the job offers one) below;
"What did training change here?" scores it with the base model and the latest checkpoint
(`rf.compare_policies`) and shows the tokens coloured by the change.
"""

from __future__ import annotations

import html
import threading
from dataclasses import dataclass
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from rlfactory_nb.compare import compare_policies_sync
from rlfactory_nb.train.run_folder import TERMINAL_STATES
from rlfactory_nb.types import Trajectory
from rlfactory_nb.widgets._base import StaticFallback, error_area, report_error, run_callback
from rlfactory_nb.widgets.front_end import figure_widget
from rlfactory_nb.widgets.static import Chart, Series, charts_html, nice_ticks
from rlfactory_nb.widgets.trajectory import TrajectoryView


@dataclass(frozen=True)
class Panel:
    title: str
    keys: tuple[str, ...]
    """metric keys drawn as lines; a key ending in "/" draws every key with that prefix"""
    stacked: bool = False
    empty_note: str = "no data yet"
    title_without: tuple[str, str] | None = None
    """(key, title): the title while the panel draws other keys but never `key`"""

    @property
    def legend(self) -> bool:
        """Whether the panel names its series: it may draw more than one."""
        return len(self.keys) > 1 or self.keys[0].endswith("/")


PANELS = (
    Panel("reward", ("reward/mean", "reward/", "eval/sampled_reward/mean", "eval/greedy_reward/mean")),
    Panel("KL and entropy", ("train/kl", "train/entropy"), title_without=("train/kl", "entropy (KL off: grpo.kl_coef = 0)")),
    Panel("response tokens", ("rollout/response_tokens_mean",)),
    Panel("tool use", ("rollout/tool_call_rate", "tools/success_rate")),
    Panel("parse errors", ("rollout/parse_errors",)),
    Panel("step time (s)", ("time/rollout_s", "time/reward_s", "time/update_s", "time/sync_s"), stacked=True),
    Panel("learning rate", ("train/lr",)),
    Panel(
        "asynchrony",
        ("async/staleness_mean", "async/staleness_max", "async/engine_busy_share", "async/trainer_busy_share", "time/wait_rollouts_s"),
        empty_note="synchronous run: no asynchrony metrics",
    ),
)
COLUMNS = 3
GRID_ROWS = -(-len(PANELS) // COLUMNS)
WIDTH_PX = 940
"""fits a JupyterLab notebook beside its file browser"""
ROW_HEIGHT_PX = 330
GAP_PX = 95
"""between grid rows: tick labels, a two-line legend, the next panel's title"""
ROLLOUT_CHOICES = 32
"""saved trajectories the rollout selector lists"""
_EXCLUDED = ("reward/std", "reward/calls", "reward/failures")
LABELS = {
    "reward/mean": "mean",
    "eval/sampled_reward/mean": "eval sampled",
    "eval/greedy_reward/mean": "eval greedy",
    "train/kl": "KL",
    "rollout/tool_call_rate": "tool-call rate",
    "tools/success_rate": "tool success",
    "async/staleness_mean": "staleness mean",
    "async/staleness_max": "staleness max",
    "async/engine_busy_share": "engine busy",
    "async/trainer_busy_share": "trainer busy",
    "time/wait_rollouts_s": "wait for rollouts (s)",
}


def label(key: str) -> str:
    """A series' short legend name: "time/update_s" -> "update", "reward/em" -> "em"."""
    if key in LABELS:
        return LABELS[key]
    return key.split("/", 1)[-1].removesuffix("_s")


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
    for wanted in panel.keys:
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


def panel_chart(panel: Panel, rows: list[dict[str, Any]]) -> Chart:
    """The static twin of one live panel."""
    drawn = panel_series(panel, rows)
    kind = "bar" if panel.stacked else "line"
    series = tuple(Series(label(key), tuple(steps), tuple(values), kind) for key, (steps, values) in drawn.items())
    title = panel_title(panel, drawn)
    return Chart(title, series, barmode="stack", integer_x=True, empty_note=panel.empty_note, legend=panel.legend)


def step_tick(last_step: int, target: int = 6) -> int:
    """The distance between step-axis ticks: a whole number of steps, about `target` ticks.

    >>> [step_tick(n) for n in (1, 2, 8, 30, 200)]
    [1, 1, 2, 5, 50]
    """
    ticks = nice_ticks(0, max(last_step, 1), target, integer=True)
    return ticks[1] - ticks[0] if len(ticks) > 1 else 1


def rollout_label(trajectory: Trajectory) -> str:
    """Plain text (a dropdown label; escaped where it goes into HTML)."""
    meta = trajectory.metadata
    calls = sum(len(turn.calls) for turn in trajectory.turns)
    reward = meta.get("reward", float("nan"))
    shown = f"{reward:.2f}" if isinstance(reward, (int, float)) else "?"  # metadata is read from a file
    return f"step {meta.get('step', '?')} · reward {shown} · {calls} tool calls · {trajectory.id}"


def rollout_order(trajectories: list[Trajectory]) -> list[Trajectory]:
    """Newest step first, best reward first within a step: the first is the default choice."""

    def key(trajectory: Trajectory) -> tuple[float, float]:
        step, reward = trajectory.metadata.get("step"), trajectory.metadata.get("reward")
        return (-_number(step), -_number(reward))

    return sorted(trajectories, key=key)


def _number(value: Any) -> float:
    """A metadata number, or 0 for anything else (metadata is read from a file)."""
    return float(value) if isinstance(value, (int, float)) else 0.0


def _button_layout(**options: Any) -> widgets.Layout:
    """As wide as the button's label, never squeezed by the status text beside it."""
    return widgets.Layout(width="auto", flex="0 0 auto", **options)


class TrainingDashboard(StaticFallback, widgets.VBox):
    def __init__(self, job: Any, refresh_s: float = 2.0, autostart: bool = True):
        self.job = job
        self.refresh_s = refresh_s
        self.status = widgets.HTML()
        self.figure = self._empty_figure()
        self._titles = tuple(self.figure.layout.annotations)
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh", layout=_button_layout())
        self.stop_button = widgets.Button(description="Stop job", icon="stop", button_style="warning", layout=_button_layout())
        self.stepper_button = widgets.Button(
            description="Step through a rollout with current weights", icon="step-forward",
            layout=_button_layout(display=None if hasattr(job, "stepper") else "none"),
        )
        self.compare_button = widgets.Button(
            description="What did training change here?", icon="exchange",
            tooltip="score the selected rollout with the run's base model and its latest checkpoint",
            layout=_button_layout(display=None if hasattr(job, "checkpoints") else "none"),
        )
        self.trajectory_choice = widgets.Dropdown(
            description="rollout", options=[], layout=widgets.Layout(width="auto", min_width="480px"),
            style={"description_width": "initial"},
        )
        self.output_area = widgets.Output()
        self.errors = error_area()
        self.refresh_button.on_click(lambda _: run_callback(self.errors, self.refresh))
        self.stop_button.on_click(lambda _: run_callback(self.errors, lambda: threading.Thread(target=job.stop, daemon=True).start()))
        self.stepper_button.on_click(lambda _: run_callback(self.errors, self.job.stepper, done=self._show))
        self.compare_button.on_click(lambda _: run_callback(self.errors, self.compare_selected, done=self._show))
        self.trajectory_choice.observe(lambda change: self._show_trajectory(change["new"]), names=["value"])
        self._rows: list[dict[str, Any]] = []
        self._trajectories: dict[str, Trajectory] = {}
        self._tokenizer: Any = None
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        controls = widgets.HBox(
            [self.refresh_button, self.stop_button, self.stepper_button, self.compare_button, self.status]
        )
        super().__init__([controls, self.figure, self.trajectory_choice, self.output_area, self.errors])
        self.add_class("rf-training-dashboard")
        self.refresh()
        if autostart:
            self.start()

    @staticmethod
    def _empty_figure() -> go.FigureWidget:
        height = ROW_HEIGHT_PX * GRID_ROWS
        margin = {"t": 40, "b": 70, "l": 50, "r": 20}
        plot_height = height - margin["t"] - margin["b"]
        figure = figure_widget(make_subplots(
            rows=GRID_ROWS, cols=COLUMNS, subplot_titles=[p.title for p in PANELS],
            horizontal_spacing=0.07, vertical_spacing=GAP_PX / plot_height,
        ))
        legends = {}
        for index, _ in enumerate(PANELS):
            suffix = "" if index == 0 else str(index + 1)
            x_domain, y_domain = figure.layout[f"xaxis{suffix}"].domain, figure.layout[f"yaxis{suffix}"].domain
            legends[f"legend{suffix}"] = {
                "x": x_domain[0], "y": y_domain[0] - 24 / plot_height, "xanchor": "left", "yanchor": "top",
                "orientation": "h", "font": {"size": 10}, "bgcolor": "rgba(0,0,0,0)",
            }
        figure.update_layout(width=WIDTH_PX, height=height, barmode="stack", margin=margin, **legends)
        figure.update_xaxes(tickformat="d", tickmode="linear", tick0=0, dtick=1)
        return figure

    def refresh(self) -> None:
        """Redraw from the job's current metrics, status and saved trajectories."""
        info = self.job.info()
        self._rows = rows = self.job.metrics()
        state = info.get("state")
        shown = {key: html.escape(str(info.get(key, default))) for key, default in [("step", 0), ("steps", "?")]}
        self.status.value = (  # job.json is a file anyone may write: every field is escaped
            f"&nbsp;<b>{html.escape(self.job.name)}</b>: {html.escape(str(state))} &middot; step {shown['step']} of "
            f"{shown['steps']} &middot; {html.escape(str(self.job.run_dir))}"
        )
        if state in TERMINAL_STATES:
            self.stop_button.disabled = True
            self.stop_button.description = f"Job {state}"
            self.stop_button.button_style = ""
            self.stop_button.icon = "check" if state == "finished" else "times"
        self._draw(rows)
        self._list_rollouts(self.job.latest_trajectories(ROLLOUT_CHOICES))

    def _draw(self, rows: list[dict[str, Any]]) -> None:
        titles, notes = [], []
        with self.figure.batch_update():
            self.figure.data = ()
            for index, panel in enumerate(PANELS):
                row, col = divmod(index, COLUMNS)
                series = panel_series(panel, rows)
                titles.append(go.layout.Annotation(self._titles[index], text=panel_title(panel, series)))
                legend = "legend" if index == 0 else f"legend{index + 1}"
                for key, (steps, values) in series.items():
                    common = {"x": steps, "y": values, "name": label(key), "legend": legend, "showlegend": panel.legend}
                    trace = go.Bar(**common) if panel.stacked else go.Scatter(mode="lines+markers", **common)
                    self.figure.add_trace(trace, row=row + 1, col=col + 1)
                if not series:
                    suffix = "" if index == 0 else str(index + 1)
                    notes.append(go.layout.Annotation(
                        text=panel.empty_note, xref=f"x{suffix} domain", yref=f"y{suffix} domain", x=0.5, y=0.5,
                        showarrow=False, font={"color": "#888", "size": 11},
                    ))
            self.figure.layout.annotations = tuple(titles + notes)
            last_step = max((int(row["step"]) for row in rows), default=1)
            self.figure.update_xaxes(dtick=step_tick(last_step))

    def _list_rollouts(self, trajectories: list[Trajectory]) -> None:
        ordered = rollout_order(trajectories)
        if [t.id for t in ordered] == list(self._trajectories):
            return
        self._trajectories = {t.id: t for t in ordered}
        chosen = self.trajectory_choice.value
        self.trajectory_choice.options = [(rollout_label(t), t.id) for t in ordered]
        if ordered:
            self.trajectory_choice.value = chosen if chosen in self._trajectories else ordered[0].id

    def charts(self) -> list[Chart]:
        """The panels as static charts, from the last refresh."""
        return [panel_chart(panel, self._rows) for panel in PANELS]

    def static_html(self) -> str:
        chosen = self._trajectories.get(self.trajectory_choice.value)
        rollout = ""
        if chosen is not None:
            rollout = f"<div><b>rollout</b> {html.escape(rollout_label(chosen))}</div>{self._view(chosen).static_html()}"
        return f"<div>{self.status.value}</div>{charts_html(self.charts())}{rollout}"

    def start(self) -> None:
        """Refresh in the background until the job ends (or `halt`)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._halt.clear()
        self._thread = threading.Thread(target=self._poll, name=f"dashboard-{self.job.name}", daemon=True)
        self._thread.start()

    def halt(self) -> None:
        self._halt.set()

    def _poll(self) -> None:
        while not self._halt.wait(self.refresh_s):
            try:
                self.refresh()
                if self.job.done:
                    self.refresh()
                    return
            except Exception as error:  # noqa: BLE001  (shown in the view; polling stops)
                report_error(self.errors, error)
                return

    def compare_selected(self) -> Any:
        """The selected rollout scored by the run's base model and by its latest checkpoint
        (`rf.compare_policies`): which of its tokens training made more or less likely."""
        trajectory = self._trajectories.get(self.trajectory_choice.value)
        if trajectory is None:
            raise ValueError("no rollout is selected: choose one in the rollout list first")
        checkpoints = self.job.checkpoints
        if not checkpoints:
            raise ValueError(
                f"job {self.job.name!r} has no checkpoint yet to compare with its base model "
                "(grpo.checkpoint_every sets how often one is written)"
            )
        return compare_policies_sync([trajectory], self.job.config().model.name, checkpoints[-1]).view()

    def _view(self, trajectory: Trajectory) -> TrajectoryView:
        if self._tokenizer is None:
            self._tokenizer = self.job.tokenizer()
        return TrajectoryView(trajectory, self._tokenizer)

    def _show_trajectory(self, trajectory_id: str | None) -> None:
        if trajectory_id in self._trajectories:
            run_callback(self.errors, lambda: self._view(self._trajectories[trajectory_id]), done=self._show)

    def _show(self, view: Any) -> None:
        """Put `view` in the output area (from any thread: no `with area:` capture)."""
        self.output_area.outputs = ()
        self.output_area.append_display_data(view)
