"""TrainingDashboard over a run folder: curves from metrics rows, rollouts from the trajectory files."""

import json

import ipywidgets

from rlfactory_nb.cluster.jobs import TrainingJob
from rlfactory_nb.train.run_folder import RunFolder
from rlfactory_nb.types import Trajectory, save_jsonl
from rlfactory_nb.widgets.dashboard import (
    PANELS,
    TrainingDashboard,
    label,
    panel_chart,
    panel_series,
    step_tick,
)
from rlfactory_nb.widgets.static import svg_chart


def row(step, reward):
    return {
        "step": step, "reward/mean": reward, "reward/std": 0.1, "reward/em": reward, "train/kl": 0.01 * step,
        "rollout/tool_call_rate": 0.5, "tools/calls": 4, "tools/status/ok": 3, "time/rollout_s": 1.0, "time/update_s": 0.5,
    }


def make_run(tmp_path, steps):
    run = tmp_path / "demo"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(row(s, s / 10)) + "\n" for s in range(1, steps + 1)))
    for step in range(1, steps + 1):
        trajectories = [Trajectory([1, 2], [3, 4], [1, 0], [-0.1], metadata={"step": step, "reward": 1.0}, id=f"s{step}t{i}") for i in range(2)]
        save_jsonl(trajectories, run / "trajectories" / f"step_{step:06d}.jsonl")
    RunFolder(run).write_status(state="finished", step=steps, steps=steps)
    return run


def test_panel_series_picks_components_and_derives_tool_success():
    rows = [row(1, 0.2), row(2, 0.4)]
    reward = panel_series(PANELS[0], rows)
    assert set(reward) == {"reward/mean", "reward/em"}  # the std is not a curve
    assert reward["reward/mean"] == ([1, 2], [0.2, 0.4])
    assert panel_series(PANELS[3], rows)["tools/success_rate"] == ([1, 2], [0.75, 0.75])
    assert panel_series(PANELS[5], rows).keys() == {"time/rollout_s", "time/update_s"}


def test_dashboard_draws_a_finished_run_without_ray(tmp_path):
    run = make_run(tmp_path, 3)
    job = TrainingJob.attach("demo", output_dir=tmp_path)
    dashboard = TrainingDashboard(job, refresh_s=0.05)
    assert "finished" in dashboard.status.value and "step 3 of 3" in dashboard.status.value
    names = {trace.name for trace in dashboard.figure.data}
    assert {"mean", "em", "KL", "tool success", "rollout"} <= names  # short names, one legend a panel
    legends = {trace.legend for trace in dashboard.figure.data if trace.showlegend}
    assert len(legends) > 1 and all(dashboard.figure.layout[name].orientation == "h" for name in legends)
    assert dashboard.figure.layout.xaxis.dtick == 1 and dashboard.figure.layout.xaxis.tickformat == "d"
    assert dashboard.stop_button.disabled and dashboard.stop_button.description == "Job finished"
    assert dashboard.stop_button.button_style == ""
    labels = [label for label, _ in dashboard.trajectory_choice.options]
    assert len(labels) == 6 and labels[0].startswith("step 3 · reward 1.00") and labels[-1].startswith("step 1")
    assert dashboard.trajectory_choice.value == "s3t0" and dashboard.output_area.outputs  # shown at once
    dashboard._thread.join(timeout=5)
    assert not dashboard._thread.is_alive()  # polling ends with the job
    static = dashboard.static_html()
    assert "<svg" in static and "tool-call rate" in static and "<script" not in static  # drawn offline
    assert "rf-strip" in static  # the chosen rollout's token strip
    assert run.exists()


def test_the_learning_rate_has_a_panel_of_its_own():
    (panel,) = [panel for panel in PANELS if panel.title == "learning rate"]
    rows = [{**row(1, 0.2), "train/lr": 1e-4}, row(2, 0.3), {**row(3, 0.4), "train/lr": 5e-5}]
    assert panel_series(panel, rows) == {"train/lr": ([1, 3], [1e-4, 5e-5])}  # steps without an update skip


def test_asynchrony_panel_plots_the_async_keys_and_is_empty_without_them(tmp_path):
    (panel,) = [panel for panel in PANELS if panel.title == "asynchrony"]
    keys = {"async/staleness_mean": 0.5, "async/staleness_max": 1, "async/engine_busy_share": 0.9,
            "async/trainer_busy_share": 0.6, "time/wait_rollouts_s": 0.2}
    assert panel_series(panel, [{**row(1, 0.2), **keys}, row(2, 0.3)]).keys() == keys.keys()
    assert panel_series(panel, [row(1, 0.2)]) == {}
    chart = panel_chart(panel, [row(1, 0.2)])
    assert "synchronous run" in svg_chart(chart)


def test_the_stepper_button_shows_the_jobs_stepper_in_the_output_area(tmp_path):
    make_run(tmp_path, 2)

    class LiveJob(TrainingJob):
        def stepper(self):
            return ipywidgets.HTML("a stepper on the current weights")

    job = LiveJob.attach("demo", output_dir=tmp_path)
    dashboard = TrainingDashboard(job, autostart=False)
    assert dashboard.stepper_button.layout.display is None
    dashboard.stepper_button.click()
    (output,) = dashboard.output_area.outputs
    assert "a stepper on the current weights" in output["data"]["text/plain"]
    assert not dashboard.errors.outputs


def test_a_job_without_a_stepper_gets_no_stepper_button(tmp_path):
    make_run(tmp_path, 1)

    class OlderJob:  # a job object from before Job.stepper existed
        def __init__(self, job):
            self._job = job

        def __getattr__(self, name):
            if name == "stepper":
                raise AttributeError(name)
            return getattr(self._job, name)

    dashboard = TrainingDashboard(OlderJob(TrainingJob.attach("demo", output_dir=tmp_path)), autostart=False)
    assert dashboard.stepper_button.layout.display == "none"


def test_step_ticks_are_whole_steps():
    assert [step_tick(n) for n in (1, 2, 5, 12, 40)] == [1, 1, 1, 2, 10]
    assert label("time/update_s") == "update" and label("reward/em") == "em"


def test_the_kl_panel_says_when_a_run_has_no_kl(tmp_path):
    """A run with grpo.kl_coef = 0 logs entropy only; the panel's title says why KL is missing."""
    (panel,) = [panel for panel in PANELS if panel.title == "KL and entropy"]
    rows = [{"step": step, "reward/mean": 0.1 * step, "train/entropy": 2.0 - 0.1 * step} for step in (1, 2)]
    assert panel_chart(panel, rows).title == "entropy (KL off: grpo.kl_coef = 0)"
    assert panel_chart(panel, [row(1, 0.2)]).title == "KL and entropy"
    run = tmp_path / "demo"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    RunFolder(run).write_status(state="finished", step=2, steps=2)
    dashboard = TrainingDashboard(TrainingJob.attach("demo", output_dir=tmp_path), autostart=False)
    titles = [annotation.text for annotation in dashboard.figure.layout.annotations]
    assert "entropy (KL off: grpo.kl_coef = 0)" in titles and "KL and entropy" not in titles
    assert titles[:len(PANELS)][0] == "reward"  # the other panels keep their titles
    assert "entropy (KL off: grpo.kl_coef = 0)" in dashboard.static_html()


def test_the_compare_button_scores_the_selected_rollout_with_base_and_latest_checkpoint(tmp_path):
    """Base and "checkpoint" are the same preset here, so every token's change is exactly 0."""
    from rlfactory_nb.config import RunConfig
    from rlfactory_nb.models.files import model_folder

    make_run(tmp_path, 2)

    class FinishedJob(TrainingJob):
        @property
        def checkpoints(self):
            return [model_folder("tiny-calculator")]

        def config(self):
            return RunConfig.from_dict({"name": "demo", "model": {"name": "tiny-calculator"}})

    dashboard = TrainingDashboard(FinishedJob.attach("demo", output_dir=tmp_path), autostart=False)
    assert dashboard.compare_button.layout.display is None
    comparison = dashboard.compare_selected()
    assert comparison.comparison.tokens["change"].abs().max() == 0.0
    dashboard.compare_button.click()
    assert not dashboard.errors.outputs and dashboard.output_area.outputs


def test_the_compare_button_says_when_there_is_no_checkpoint_yet(tmp_path):
    make_run(tmp_path, 1)
    dashboard = TrainingDashboard(TrainingJob.attach("demo", output_dir=tmp_path), autostart=False)
    dashboard.compare_button.click()
    assert "has no checkpoint yet" in str(dashboard.errors.outputs)
