"""RewardLabView (`lab.view()`): a RewardLab's warnings, per-sample table, score histograms, the
advantages each sample would get, and any sample's trajectory.

The lab itself (sampling, scoring, the table, the warnings) is rlfactory_nb/reward_lab.py; this view
only draws it, and redraws after every `lab.rescore`.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from rlfactory_nb._views import html_table
from rlfactory_nb.reward_lab import RewardLab
from rlfactory_nb.widgets._base import StaticFallback, figure_html
from rlfactory_nb.widgets.controls import selector, set_options
from rlfactory_nb.widgets.front_end import figure_widget
from rlfactory_nb.widgets.registry import register_view
from rlfactory_nb.widgets.trajectory import TrajectoryView


def table_html(table: Any) -> str:
    """A lab's table (a DataFrame): one line per sample, long cells cut with the whole text on hover,
    scores to 3 places, and how many samples it holds."""
    if table.empty:
        return "<div>no samples yet</div>"
    return html_table([str(c) for c in table.columns], [list(row) for row in table.itertuples(index=False)], "samples")


@register_view(RewardLab)
class RewardLabView(StaticFallback, widgets.VBox):
    """Warnings, the per-sample table, score histograms, advantages, and any sample's trajectory."""

    def __init__(self, lab: RewardLab):
        self.lab = lab
        self.warnings = widgets.HTML()
        self.table = widgets.HTML()
        self.histograms = figure_widget(layout={  # side by side: overlaid, one reward's bars hid another's
            "title": "scores by reward function (samples per score)", "barmode": "group", "height": 300,
            "xaxis": {"title": "score"}, "yaxis": {"title": "samples"},
        })
        self.advantage_plot = figure_widget(layout={"title": "GRPO advantage per sample", "height": 300, "xaxis": {"title": "prompt"}})
        self.reward_choice = selector("advantages of reward")
        self.sample_choice = selector("trajectory of sample")
        self.trajectory_area = widgets.Output()
        self.reward_choice.observe(lambda _: self._draw_advantages(), names=["value"])
        self.sample_choice.observe(lambda change: self._show_trajectory(change["new"]), names=["value"])
        super().__init__(
            [self.warnings, self.table, self.histograms, self.reward_choice, self.advantage_plot, self.sample_choice, self.trajectory_area]
        )
        self.add_class("rf-reward-lab")
        lab.on_change(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        lab = self.lab
        self.warnings.value = lab.warnings()._repr_html_()
        self.table.value = table_html(lab.table())
        with self.histograms.batch_update():
            self.histograms.data = ()
            for name in lab.names if lab.outcomes else []:
                self.histograms.add_histogram(x=lab.scores(name).flatten().tolist(), name=name)
        set_options(self.reward_choice, lab.names)
        shown = self.sample_choice.value
        set_options(
            self.sample_choice,
            [(f"prompt {p} sample {s}", (p, s)) for p, group in enumerate(lab.groups) for s in range(len(group))],
        )
        if self.sample_choice.value == shown:  # same choice, new rollouts: no change event to redraw it
            self._show_trajectory(shown)
        self._draw_advantages()

    def static_html(self) -> str:
        return self.warnings.value + self.table.value + figure_html(self.histograms) + figure_html(self.advantage_plot)

    def _draw_advantages(self) -> None:
        lab = self.lab
        with self.advantage_plot.batch_update():
            self.advantage_plot.data = ()
            if lab.outcomes and self.reward_choice.value:
                advantages = lab.advantages(self.reward_choice.value)  # (N, G)
                prompts = [p for p in range(advantages.shape[0]) for _ in range(advantages.shape[1])]
                self.advantage_plot.add_scatter(x=prompts, y=advantages.flatten().tolist(), mode="markers", name="advantage")

    def _show_trajectory(self, choice: tuple[int, int] | None) -> None:
        self.trajectory_area.clear_output()
        if choice is None:
            return
        prompt, sample = choice
        with self.trajectory_area:
            from IPython.display import display

            display(TrajectoryView(self.lab.groups[prompt][sample], self.lab.agent.tokenizer))
