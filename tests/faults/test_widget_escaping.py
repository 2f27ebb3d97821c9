"""Text from disk or from a model never reaches a widget as markup (issue 32, item 7).

job.json's state and step and a trajectory's metadata reached widgets.HTML unescaped, so an
`<img onerror>` in a run folder ran script in JupyterLab. Each view here is fed a tag in every text
field it shows (a run folder, a trajectory, model replies, tool results, eval rows), and every HTML
value in its widget tree, and its static HTML fallback, must hold the tag escaped.
"""

import json
import re

import ipywidgets as widgets
from rollout.scripted import ScriptedEngine  # tests/ is on sys.path

from rlfactory_nb.cluster.jobs import TrainingJob
from rlfactory_nb.eval import EvalComparison, EvalReport, EvalRow
from rlfactory_nb.reward_lab import RewardLab
from rlfactory_nb.rollout.agent import Agent
from rlfactory_nb.tools import ToolSet
from rlfactory_nb.train.run_folder import RunFolder
from rlfactory_nb.types import MalformedCall, ToolCall, ToolResult, Trajectory, Turn, save_jsonl
from rlfactory_nb.widgets._base import StaticFallback
from rlfactory_nb.widgets.dashboard import TrainingDashboard, rollout_label, rollout_order
from rlfactory_nb.widgets.eval import comparison_view, report_view
from rlfactory_nb.widgets.stepper import RolloutStepper
from rlfactory_nb.widgets.tools import ToolSetView
from rlfactory_nb.widgets.trajectory import TrajectoryView

TAG = "<img src=x onerror=alert(1)><script>alert(2)</script>"
MARKUP = re.compile(r"<\s*/?\s*(img|script)\b", re.IGNORECASE)


def html_values(widget) -> list[str]:
    """Every HTML string a widget tree shows: HTML/HTMLMath values, Output areas' HTML and each
    view's static fallback."""
    found = []
    if isinstance(widget, (widgets.HTML, widgets.HTMLMath)):
        found.append(widget.value)
    if isinstance(widget, StaticFallback):
        found.append(widget._repr_mimebundle_()["text/html"])
    if isinstance(widget, widgets.Output):
        found += [output.get("data", {}).get("text/html", "") for output in widget.outputs]
    for child in getattr(widget, "children", ()):
        found += html_values(child)
    return found


def assert_escaped(view) -> None:
    values = html_values(view)
    assert values and any("&lt;img" in value for value in values), "the hostile text is not shown at all"
    for value in values:
        match = MARKUP.search(value)
        assert match is None, f"unescaped {match.group(0)!r} in: ...{value[max(0, match.start() - 80):match.end() + 40]}..."


def hostile_trajectory(id: str = TAG) -> Trajectory:
    turn = Turn(
        TAG,
        num_tokens=3,
        calls=[ToolCall(TAG, {TAG: TAG})],
        results=[ToolResult(TAG, "ok", TAG)],
        parse_errors=[MalformedCall(TAG)],
        finish_reason=TAG,
        policy_version=TAG,
    )
    return Trajectory(
        [1, 2],
        [3, 4],
        [1, 0],
        [-0.1],
        turns=[turn],
        messages=[{"role": "user", "content": TAG}, {"role": TAG, "content": TAG}],
        finish_reason=TAG,
        metadata={"step": 1, "reward": 0.5, "ground_truth": TAG, "drift_position": 3, "dropped_think_blocks": TAG},
        id=id,
    )


def scripted_agent(tokenizer, tools, replies):
    return Agent(None, tools, engine=ScriptedEngine(tokenizer, replies), tokenizer=tokenizer)


def test_the_dashboard_escapes_job_json_and_trajectory_metadata(tmp_path):
    run = tmp_path / "demo"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.5, f"reward/{TAG}": 0.5}) + "\n")
    save_jsonl([hostile_trajectory()], run / "trajectories" / "step_000001.jsonl")
    RunFolder(run).write_status(state=TAG, step=TAG, steps=TAG)
    dashboard = TrainingDashboard(TrainingJob.attach("demo", output_dir=tmp_path), autostart=False)
    dashboard.refresh()
    assert_escaped(dashboard)  # before: job.json's state and step reached the status line as markup


def test_the_trajectory_view_escapes_every_field():
    view = TrajectoryView(hostile_trajectory())
    view.drift_toggle.value = True
    assert_escaped(view)  # before: the metadata's drift fields and reward


def test_metadata_of_the_wrong_type_is_shown_as_text():
    trajectory = hostile_trajectory()
    trajectory.metadata.update(step=TAG, reward=TAG, drift_position=TAG)  # before: a format error or float()
    view = TrajectoryView(trajectory)
    view.drift_toggle.value = True
    assert_escaped(view)
    assert "reward ?" in rollout_label(trajectory) and rollout_order([trajectory]) == [trajectory]


async def test_the_stepper_escapes_prompt_and_model_text(tokenizer):
    agent = scripted_agent(tokenizer, None, {"img": [TAG]})
    stepper = RolloutStepper(agent, {"messages": [{"role": "user", "content": TAG}], "metadata": {"ground_truth": TAG}})
    await stepper.run_to_end()
    assert_escaped(stepper)


async def test_the_reward_lab_escapes_model_text_and_labels(tokenizer):
    rows = [{"messages": [{"role": "user", "content": TAG}], "ground_truth": TAG}]

    def shouty(sample):
        raise ValueError(TAG)

    lab = RewardLab(scripted_agent(tokenizer, None, {"img": [TAG]}), rows, rewards={"r": shouty}, group_size=2)
    await lab.sample(n_prompts=1)
    assert_escaped(lab.view())


def test_the_eval_views_escape_labels_and_rows():
    row = EvalRow(0, TAG, TAG, TAG, 0.5, TAG, 0.5, 1)
    report = EvalReport(TAG, 0.5, 0.5, 0.5, 0.5, 0.0, 1.0, [row])
    assert_escaped(report_view(report))
    assert_escaped(comparison_view(EvalComparison(report, report)))


async def test_the_tools_view_escapes_tool_results():
    def echo(text: str) -> str:
        """Echo the text."""
        return text

    async with ToolSet.from_functions(echo) as tools:
        view = ToolSetView(tools)
        view.arguments.value = json.dumps({"text": TAG})
        view._show(await view.call_from_form())
        assert_escaped(view)


def test_a_failing_static_rendering_shows_its_error_as_text():
    class Broken(StaticFallback, widgets.VBox):
        def static_html(self):
            raise ValueError(TAG)

    assert not MARKUP.search(Broken()._repr_mimebundle_()["text/html"])  # before: the message as markup
