"""TrainingDashboard (`job.dashboard()`): a run's curves while it trains, and its saved rollouts.

Curves come from `job.metrics()` (the rows of runs/<name>/metrics.jsonl): reward and its components
with the held-out evals, KL and entropy, response length, tool use, parse errors, each step's time
split into rollout / reward / update / sync, the learning rate (`grpo.lr_schedule`), and an
asynchronous run's staleness and busy shares. Each panel has a legend of its own with short names;
step axes tick on whole steps and say "step"; units are in the titles; every y axis is fitted to its
data (`axis_range`: from 0 for values that never go below it). A series drawn exactly over another
is dashed, and its legend says which it equals. Panels that do not apply to the run (asynchrony
when synchronous, KL when off) say so, from the run's config. Buttons that cannot act are disabled,
with the reason as their tooltip; a failing action shows one message. A daemon thread refreshes every `refresh_s` seconds until the job
ends; a thread rather than an asyncio task so that refreshing goes on while a cell blocks in
`job.wait()`. The rollout selector lists the run's saved trajectories, newest step first, and shows
the chosen one (or a RolloutStepper on the job's current weights, where the job offers one) below;
"What did training change here?" scores it with the base model and the latest checkpoint
(`rf.compare_policies`) and shows the tokens coloured by the change.
"""

from __future__ import annotations

import contextlib
import html
import threading
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from rlfactory_nb.compare import compare_policies_sync
from rlfactory_nb.train.run_folder import TERMINAL_STATES
from rlfactory_nb.types import Trajectory
from rlfactory_nb.widgets._base import StaticFallback, error_area, report_error, run_callback
from rlfactory_nb.widgets.dashboard_panels import (
    PANELS,
    axis_range,
    covered,
    label,
    panel_chart,
    panel_series,
    panel_title,
    series_kind,
    series_names,
    step_tick,
)
from rlfactory_nb.widgets.front_end import figure_widget
from rlfactory_nb.widgets.static import Chart, charts_html
from rlfactory_nb.widgets.trajectory import TrajectoryView

COLUMNS = 3
GRID_ROWS = -(-len(PANELS) // COLUMNS)
WIDTH_PX = 940
"""fits a JupyterLab notebook beside its file browser"""
ROW_HEIGHT_PX = 330
GAP_PX = 112
"""between grid rows: tick labels, the x title, a two-line legend, the next panel's title"""
LEGEND_OFFSET_PX = 40
"""from a panel's bottom edge to its legend: below the tick labels and the "step" title"""
ROLLOUT_CHOICES = 32
"""saved trajectories the rollout selector lists"""


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


def stepper_unavailable(job: Any) -> str | None:
    """Why "Step through a rollout" cannot act on `job` (None: it can): it starts an engine on a
    cluster, so a job attached from its run folder alone (no cluster) cannot."""
    if getattr(job, "cluster", "unknown") is None and getattr(job, "_actor", None) is None:
        return (
            f"needs a cluster to run an engine on: rf.TrainingJob.attach({getattr(job, 'name', '...')!r}, "
            "rf.Cluster.connect()) (this job was attached from its run folder only)"
        )
    return None


def _button_layout(**options: Any) -> widgets.Layout:
    """As wide as the button's label, never squeezed by the status text beside it."""
    return widgets.Layout(width="auto", flex="0 0 auto", **options)


class TrainingDashboard(StaticFallback, widgets.VBox):
    def __init__(self, job: Any, refresh_s: float = 2.0, autostart: bool = True):
        self.job = job
        self.refresh_s = refresh_s
        self.config = None
        """the run's config when the job can say (what panels that do not apply say); None: unknown"""
        with contextlib.suppress(Exception):  # an attached folder without a checkpoint has none yet
            self.config = job.config()
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
        controls = widgets.HBox([self.refresh_button, self.stop_button, self.stepper_button, self.compare_button])
        # the status on a line of its own: beside the buttons it was squeezed into a column a word wide
        super().__init__([self.status, controls, self.figure, self.trajectory_choice, self.output_area, self.errors])
        self.add_class("rf-training-dashboard")
        self.refresh()
        if autostart:
            self.start()

    def _enable_buttons(self) -> None:
        """Disable the buttons that cannot act on this job now, the reason as their tooltip."""
        cannot_step = stepper_unavailable(self.job)
        self.stepper_button.disabled = cannot_step is not None
        self.stepper_button.tooltip = cannot_step or "a RolloutStepper on the job's current weights, one turn at a time"
        cannot_compare = None if getattr(self.job, "checkpoints", [None]) else (
            "no checkpoint yet to compare with the base model (grpo.checkpoint_every sets how often one is written)"
        )
        self.compare_button.disabled = cannot_compare is not None
        self.compare_button.tooltip = cannot_compare or "score the selected rollout with the run's base model and its latest checkpoint"

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
                "x": x_domain[0], "y": y_domain[0] - LEGEND_OFFSET_PX / plot_height, "xanchor": "left", "yanchor": "top",
                "orientation": "h", "font": {"size": 10}, "bgcolor": "rgba(0,0,0,0)",
            }
        figure.update_layout(width=WIDTH_PX, height=height, barmode="stack", margin=margin, **legends)
        figure.update_xaxes(
            tickformat="d", tickmode="linear", tick0=0, dtick=1, title={"text": "step", "font": {"size": 10}, "standoff": 2},
        )
        figure.update_yaxes(exponentformat="power", tickformat="~g")  # 3e-4 reads as 0.0003, not 300µ
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
        self._enable_buttons()
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
                names, over = series_names(series), covered(series)
                for key, (steps, values) in series.items():
                    shown = panel.legend and bool(names[key])
                    common = {"x": steps, "y": values, "name": names[key] or label(key), "legend": legend, "showlegend": shown}
                    if series_kind(panel, key) == "bar":
                        trace = go.Bar(**common)
                    else:
                        trace = go.Scatter(mode="lines+markers", line={"dash": "dash" if key in over else "solid"}, **common)
                    self.figure.add_trace(trace, row=row + 1, col=col + 1)
                fitted = axis_range(panel, series)
                self.figure.update_yaxes(
                    row=row + 1, col=col + 1, **({"range": list(fitted), "autorange": False} if fitted else {"autorange": True})
                )
                if not series:
                    suffix = "" if index == 0 else str(index + 1)
                    notes.append(go.layout.Annotation(
                        text=panel.note(self.config), xref=f"x{suffix} domain", yref=f"y{suffix} domain", x=0.5, y=0.5,
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
        return [panel_chart(panel, self._rows, self.config) for panel in PANELS]

    def static_html(self) -> str:
        """The finished run's curves and chosen rollout; while the job still runs, one line saying
        where the live view was (a snapshot of a run in progress would stay "starting" in a saved
        notebook: `job.dashboard()` after `job.wait()` saves the final one)."""
        info = self.job.info()
        if info.get("state") not in TERMINAL_STATES:
            return (
                f"<div class='rf-dashboard-live' style='color:#555'>live dashboard of job <b>{html.escape(self.job.name)}</b> "
                f"here ({html.escape(str(info.get('state')))} at step {html.escape(str(info.get('step', 0)))} when shown; "
                "it refreshes in a live notebook). The finished run's curves are where <code>job.dashboard()</code> "
                "runs after <code>job.wait()</code>.</div>"
            )
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
