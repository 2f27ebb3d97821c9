"""TrajectoryView: the token strip marks exactly the loss mask, and the drift verdict is reported."""

import re

from rlfactory_nb.types import Trajectory
from rlfactory_nb.widgets.trajectory import TrajectoryView, drift_html, token_strip_html

from .conftest import CALL, scripted_agent


async def rolled_out(tokenizer, tools):
    agent = scripted_agent(tokenizer, tools, {"2+3": [CALL.format(a=2, b=3), "<answer>5</answer>"]})
    return await agent.rollout([{"role": "user", "content": "What is 2+3?"}])


async def test_token_strip_classes_follow_the_loss_mask(tokenizer, tools):
    traj = await rolled_out(tokenizer, tools)
    strip = token_strip_html(traj, tokenizer)
    classes = re.findall(r"class='rf-token (rf-trained|rf-masked)' title='id (\d+)", strip)
    assert [int(token) for _, token in classes] == traj.response_ids
    assert [1 if kind == "rf-trained" else 0 for kind, _ in classes] == traj.loss_mask
    assert 0 < sum(traj.loss_mask) < len(traj.loss_mask)  # tool tokens in between are masked
    assert "logprob -0.500" in strip and "<tool_response>" not in strip  # escaped, never raw HTML


async def test_a_distilled_trajectory_colours_its_sampled_tokens_by_the_teacher_student_gap(tokenizer, tools):
    traj = await rolled_out(tokenizer, tools)
    assert "teacher minus student" not in token_strip_html(traj, tokenizer)  # no teacher: green and grey
    sampled = sum(traj.loss_mask)
    traj.metadata["teacher_logprobs"] = [logprob + (1.0 if k == 0 else -0.5) for k, logprob in enumerate(traj.logprobs)]
    strip = token_strip_html(traj, tokenizer)
    styled = re.findall(r"class='rf-token rf-trained' title='[^']*gap ([+-]\d\.\d+)' style='background:(rgb\([\d,]+\))'", strip)
    assert len(styled) == sampled and "teacher minus student" in strip
    assert styled[0] == ("+1.000", "rgb(33,102,172)")  # the largest gap: the scale's full blue
    assert {gap for gap, _ in styled[1:]} == {"-0.500"}
    assert strip.count("rf-masked' title") == len(traj.loss_mask) - sampled  # masked tokens stay grey


async def test_view_decodes_with_the_tokenizer_it_is_given_and_survives_a_json_round_trip(tokenizer, tools):
    traj = await rolled_out(tokenizer, tools)
    view = traj.view(tokenizer)
    assert "&lt;|im_end|&gt;" in view.strip.value and "add" in view.turns.value and "ok" in view.turns.value
    assert not hasattr(traj, "_tokenizer")  # nothing hidden on the record: the tokenizer is passed
    loaded = Trajectory.from_dict(traj.to_dict())
    assert f">[{traj.response_ids[0]}]<" in TrajectoryView(loaded).strip.value  # no tokenizer: ids shown
    assert "&lt;|im_end|&gt;" in TrajectoryView(loaded, tokenizer).static_html()


async def test_drift_toggle_and_verdicts(tokenizer, tools):
    traj = await rolled_out(tokenizer, tools)
    view = TrajectoryView(traj)
    assert view.drift.layout.display == "none"
    view.drift_toggle.value = True
    assert view.drift.layout.display == "block"
    # the scripted two-turn rollout has Qwen3's expected drift: shown and counted, not alarming
    assert traj.metadata["dropped_think_blocks"] == 1 and "expected template drift" in drift_html(traj)
    assert "1 dropped think block(s), expected" in view.summary.value
    traj.metadata.update(drift_position=len(traj.prompt_ids) + 3, dropped_think_blocks=0)
    assert "response token 3" in drift_html(traj, tokenizer)
    view.update(traj)
    assert "template drift at position" in view.summary.value
    traj.metadata["drift_position"] = -1
    assert "equal a full chat-template render" in drift_html(traj)
    del traj.metadata["drift_position"]
    assert "not run" in drift_html(traj)


def test_reasoning_is_shown_apart_and_folded():
    from rlfactory_nb.types import Turn
    from rlfactory_nb.widgets.trajectory import turn_html

    turn = Turn(text="<think>12*7 is 84</think>\n\n84", num_tokens=9, reasoning="12*7 is 84", answer="84", calls_in_reasoning=1)
    shown = turn_html(1, turn)
    folded = re.search(r"<details class='rf-reasoning'><summary>(.*?)</summary><pre>(.*?)</pre></details>", shown)
    assert folded and folded.group(2) == "12*7 is 84" and "1 call(s) drafted, not run" in folded.group(1)
    assert shown.endswith("<pre>84</pre></div>"), "the answer is shown outside the fold, without the reasoning"
    plain = turn_html(1, Turn(text="84", num_tokens=1))
    assert "<details" not in plain and "<pre>84</pre>" in plain


def test_a_saved_trajectory_folds_its_drift_note_behind_drift_check():
    from rlfactory_nb.widgets.trajectory import TrajectoryView

    traj = Trajectory([1, 2], [3, 4], [1, 0], [-0.1], metadata={"drift_position": 3, "dropped_think_blocks": 1})
    static = TrajectoryView(traj).static_html()
    folded = static.split("<details class='rf-drift'><summary>Drift check: ", 1)
    assert len(folded) == 2 and "expected template drift" in folded[1]
    assert "expected template drift. A full" not in folded[0]  # the paragraph is only in the fold
