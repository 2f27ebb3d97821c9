"""TrainingDashboard over a run folder: curves from metrics rows, rollouts from the trajectory files."""

import json

import ipywidgets

from rlfactory_nb.cluster.jobs import TrainingJob
from rlfactory_nb.train.run_folder import RunFolder
from rlfactory_nb.types import Trajectory, save_jsonl
from rlfactory_nb.widgets.dashboard import TrainingDashboard
from rlfactory_nb.widgets.dashboard_panels import (
    PANELS,
    label,
    panel_chart,
    panel_series,
    panel_title,
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
    assert {"mean = em", "KL", "tool success", "rollout"} <= names  # short names, one legend a panel
    (hidden,) = [trace for trace in dashboard.figure.data if trace.name == "em"]
    assert hidden.line.dash == "dash" and not hidden.showlegend  # drawn exactly over "mean": dashed, both show
    assert all(dashboard.figure.layout[axis].title.text == "step" for axis in ("xaxis", "xaxis5", "xaxis9"))
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


def test_an_sft_runs_loss_and_rate_are_drawn():
    """An SFT job writes sft/loss and sft/lr and no reward: the first panel draws the loss, titled so."""
    rows = [{"step": 1, "sft/loss": 6.3, "sft/lr": 3e-3}, {"step": 2, "sft/loss": 4.1, "sft/lr": 3e-3}]
    (lr,) = [panel for panel in PANELS if panel.title == "learning rate"]
    first = panel_series(PANELS[0], rows)
    assert first == {"sft/loss": ([1, 2], [6.3, 4.1])} and panel_title(PANELS[0], first).startswith("SFT loss")
    assert panel_series(lr, rows) == {"sft/lr": ([1, 2], [3e-3, 3e-3])}
    assert panel_title(PANELS[0], panel_series(PANELS[0], [row(1, 0.2)])) == "reward"


def test_asynchrony_panels_keep_steps_and_shares_apart_and_say_when_a_run_is_synchronous(tmp_path):
    """Staleness (steps) and busy shares (0-1) have panels of their own; the wait for rollouts (s) is a
    line of the step-time panel. A panel says "synchronous run" only when the config says so."""
    from rlfactory_nb.config import RunConfig

    staleness, busy = [panel for panel in PANELS if panel.asynchronous]
    keys = {"async/staleness_mean": 0.5, "async/staleness_max": 1, "async/engine_busy_share": 0.9,
            "async/trainer_busy_share": 0.6, "time/wait_rollouts_s": 0.2}
    rows = [{**row(1, 0.2), **keys}, row(2, 0.3)]
    assert panel_series(staleness, rows).keys() == {"async/staleness_mean", "async/staleness_max"}
    assert panel_series(busy, rows).keys() == {"async/engine_busy_share", "async/trainer_busy_share"}
    assert "time/wait_rollouts_s" in panel_series(PANELS[5], rows)
    assert "steps" in staleness.title and "share" in busy.title
    synchronous, asynchronous = RunConfig(name="x"), RunConfig(name="x").replace({"grpo.max_staleness": 1, "grpo.truncate_ratio": 2.0})
    assert "synchronous run" in svg_chart(panel_chart(busy, [row(1, 0.2)], synchronous))
    assert "synchronous" not in svg_chart(panel_chart(busy, [row(1, 0.2)], asynchronous))
    assert "synchronous" not in svg_chart(panel_chart(busy, [row(1, 0.2)]))  # config unknown: no claim


def test_every_axis_fits_its_data_from_zero_and_says_step():
    """A constant learning rate of 3e-4 spans its axis (the live one ran from -0.5 to 1); a count never
    dips below 0."""
    from rlfactory_nb.widgets.dashboard_panels import axis_range

    (lr,) = [panel for panel in PANELS if panel.title == "learning rate"]
    assert axis_range(lr, {"train/lr": ([1, 2, 3], [3e-4] * 3)}) == (0.0, 3e-4 * 1.08)
    (errors,) = [panel for panel in PANELS if "parse errors" in panel.title]
    assert axis_range(errors, {"rollout/parse_errors": ([1, 2], [0.0, 3.0])})[0] == 0.0
    assert axis_range(PANELS[5], {"time/rollout_s": ([1], [1.0]), "time/update_s": ([1], [2.0])})[1] > 3.0  # stacked
    chart = panel_chart(lr, [{**row(1, 0.2), "train/lr": 3e-4}])
    assert chart.x_title == "step" and chart.y_range == (0.0, 3e-4 * 1.08)


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
    assert dashboard.compare_button.disabled and "no checkpoint yet" in dashboard.compare_button.tooltip
    dashboard.compare_button.click()
    assert "has no checkpoint yet" in str(dashboard.errors.outputs)


def test_a_job_attached_without_a_cluster_disables_the_stepper_saying_why(tmp_path):
    """The button stayed enabled on a finished run attached from its folder, and a click printed a
    raw RuntimeError traceback in the widget: now it is disabled, its tooltip names the fix, and a
    failing action shows one message."""
    make_run(tmp_path, 1)
    dashboard = TrainingDashboard(TrainingJob.attach("demo", output_dir=tmp_path), autostart=False)
    assert dashboard.stepper_button.disabled and "rf.Cluster.connect()" in dashboard.stepper_button.tooltip
    dashboard.stepper_button.click()  # ipywidgets still runs the handler from Python
    (output,) = dashboard.errors.outputs
    assert output["text"].count("\n") == 1 and "Traceback" not in output["text"]


def test_a_saved_dashboard_of_a_running_job_is_one_line_not_a_frozen_start(tmp_path):
    run = make_run(tmp_path, 2)
    RunFolder(run).write_status(state="running", step=0, steps=2)
    dashboard = TrainingDashboard(TrainingJob.attach("demo", output_dir=tmp_path), autostart=False)
    static = dashboard.static_html()
    assert "live dashboard of job" in static and "<svg" not in static and "no data yet" not in static
    RunFolder(run).write_status(state="finished", step=2, steps=2)
    assert "<svg" in dashboard.static_html()
