"""TrainingDashboard (`job.dashboard()`): a run's curves while it trains, and its latest rollouts.

Curves come from `job.metrics()` (the rows of runs/<name>/metrics.jsonl): reward and its components
with the held-out evals, KL and entropy, response length, tool use, parse errors, the learning rate
(`grpo.lr_schedule`), and each step's time split into rollout / reward / update / sync. A daemon thread refreshes them every `refresh_s`
seconds until the job ends; a thread rather than an asyncio task so that refreshing goes on while a
cell blocks in `job.wait()`. The latest trajectories open in TrajectoryView.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from rlfactory_nb.widgets._base import StaticFallback, error_area, figure_html, report_error, run_callback
from rlfactory_nb.widgets.trajectory import TrajectoryView


@dataclass(frozen=True)
class Panel:
    title: str
    keys: tuple[str, ...]
    """metric keys drawn as lines; a key ending in "/" draws every key with that prefix"""
    stacked: bool = False


PANELS = (
    Panel("reward", ("reward/mean", "reward/", "eval/sampled_reward/mean", "eval/greedy_reward/mean")),
    Panel("KL and entropy", ("train/kl", "train/entropy")),
    Panel("response tokens", ("rollout/response_tokens_mean",)),
    Panel("tool use", ("rollout/tool_call_rate", "tools/success_rate")),
    Panel("parse errors", ("rollout/parse_errors",)),
    Panel("step time (s)", ("time/rollout_s", "time/reward_s", "time/update_s", "time/sync_s"), stacked=True),
    Panel("learning rate", ("train/lr",)),
)
GRID_ROWS = -(-len(PANELS) // 3)
"""three panels a row"""
_EXCLUDED = ("reward/std", "reward/calls", "reward/failures")


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


class TrainingDashboard(StaticFallback, widgets.VBox):
    def __init__(self, job: Any, refresh_s: float = 2.0, autostart: bool = True):
        self.job = job
        self.refresh_s = refresh_s
        self.status = widgets.HTML()
        self.figure = go.FigureWidget(
            make_subplots(rows=GRID_ROWS, cols=3, subplot_titles=[p.title for p in PANELS], horizontal_spacing=0.07)
        )
        self.figure.update_layout(height=280 * GRID_ROWS, barmode="stack", legend={"font": {"size": 9}}, margin={"t": 40, "b": 30})
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh")
        self.stop_button = widgets.Button(description="Stop job", icon="stop", button_style="warning")
        self.trajectory_choice = widgets.Dropdown(description="rollout", options=[])
        self.trajectory_area = widgets.Output()
        self.errors = error_area()
        self.refresh_button.on_click(lambda _: run_callback(self.errors, self.refresh))
        self.stop_button.on_click(lambda _: run_callback(self.errors, lambda: threading.Thread(target=job.stop, daemon=True).start()))
        self.trajectory_choice.observe(lambda change: self._show_trajectory(change["new"]), names=["value"])
        self._trajectories: list[Any] = []
        self._tokenizer: Any = None
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        controls = widgets.HBox([self.refresh_button, self.stop_button, self.status])
        super().__init__([controls, self.figure, self.trajectory_choice, self.trajectory_area, self.errors])
        self.add_class("rf-training-dashboard")
        self.refresh()
        if autostart:
            self.start()

    def refresh(self) -> None:
        """Redraw from the job's current metrics, status and latest trajectories."""
        info = self.job.info()
        rows = self.job.metrics()
        self.status.value = (
            f"&nbsp;<b>{self.job.name}</b>: {info.get('state')} &middot; step {info.get('step', 0)} of "
            f"{info.get('steps', '?')} &middot; {self.job.run_dir}"
        )
        with self.figure.batch_update():
            self.figure.data = ()
            for index, panel in enumerate(PANELS):
                row, col = divmod(index, 3)
                for key, (steps, values) in panel_series(panel, rows).items():
                    trace = go.Bar(x=steps, y=values, name=key) if panel.stacked else go.Scatter(x=steps, y=values, name=key, mode="lines+markers")
                    self.figure.add_trace(trace, row=row + 1, col=col + 1)
        trajectories = self.job.latest_trajectories(8)
        if [t.id for t in trajectories] != [t.id for t in self._trajectories]:
            self._trajectories = trajectories
            self.trajectory_choice.options = [
                (f"step {t.metadata.get('step', '?')} · reward {t.metadata.get('reward', float('nan')):.2f} · {t.id}", i)
                for i, t in enumerate(trajectories)
            ]

    def static_html(self) -> str:
        return f"<div>{self.status.value}</div>{figure_html(self.figure)}"

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

    def _show_trajectory(self, index: int | None) -> None:
        self.trajectory_area.clear_output()
        if index is None or index >= len(self._trajectories):
            return
        if self._tokenizer is None:
            self._tokenizer = self.job.tokenizer()
        view = TrajectoryView(self._trajectories[index], self._tokenizer)
        with self.trajectory_area:
            from IPython.display import display

            display(view)
