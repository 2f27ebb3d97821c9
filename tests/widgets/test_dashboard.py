"""TrainingDashboard over a run folder: curves from metrics rows, rollouts from the trajectory files."""

import json

from rlfactory_nb.cluster.jobs import TrainingJob
from rlfactory_nb.cluster.run_folder import RunFolder
from rlfactory_nb.types import Trajectory, save_jsonl
from rlfactory_nb.widgets.dashboard import PANELS, TrainingDashboard, panel_series


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
    assert {"reward/mean", "train/kl", "tools/success_rate", "time/rollout_s"} <= names
    assert [label for label, _ in dashboard.trajectory_choice.options][-1].startswith("step 3")
    dashboard._thread.join(timeout=5)
    assert not dashboard._thread.is_alive()  # polling ends with the job
    assert "Plotly.newPlot" in dashboard.static_html() and "tool_call_rate" in dashboard.static_html()
    assert run.exists()


def test_the_learning_rate_has_a_panel_of_its_own():
    (panel,) = [panel for panel in PANELS if panel.title == "learning rate"]
    rows = [{**row(1, 0.2), "train/lr": 1e-4}, row(2, 0.3), {**row(3, 0.4), "train/lr": 5e-5}]
    assert panel_series(panel, rows) == {"train/lr": ([1, 3], [1e-4, 5e-5])}  # steps without an update skip
