"""RewardLabView: draws the lab (reward_lab.py), redraws after a rescore, and opens with every
selector labelled in full and a choice made."""

from rlfactory_nb.reward_lab import RewardLab
from rlfactory_nb.rewards import exact_match
from rlfactory_nb.widgets.reward_lab import RewardLabView

from .conftest import CALL, scripted_agent

ROWS = [
    {"messages": [{"role": "user", "content": "What is 2+3?"}], "ground_truth": "5"},
    {"messages": [{"role": "user", "content": "What is 4+4?"}], "ground_truth": "8"},
]


def used_tool(sample):
    return float(bool(sample.tool_results))


async def test_the_view_opens_with_choices_made_and_redraws_after_a_rescore(tokenizer, tools):
    agent = scripted_agent(tokenizer, tools, {"+": [CALL.format(a=2, b=3), "<answer>5</answer>"]})
    lab = RewardLab(agent, ROWS, rewards={"em": exact_match, "used_tool": used_tool}, group_size=2)
    await lab.sample(n_prompts=2)
    view = lab.view()
    assert isinstance(view, RewardLabView)
    for choice in (view.reward_choice, view.sample_choice):
        assert choice.style.description_width == "initial" and choice.value is not None
    assert view.reward_choice.value == "em" and view.sample_choice.value == (0, 0)
    assert len(view.advantage_plot.data) == 1  # drawn before anyone picks
    assert "<td>prompt</td>" not in view.table.value and "<th>used_tool</th>" in view.table.value
    view.reward_choice.value = "used_tool"

    def em(sample):
        raise KeyError("answer")

    await lab.rescore(em=em)
    assert "failed and scored 0" in view.warnings.value  # open views redraw after a rescore
    assert view.reward_choice.value == "used_tool"  # a choice the user made survives the redraw
    assert len(view.sample_choice.options) == 4 and "<svg" in view.static_html()


def test_an_empty_lab_draws_without_choices(tokenizer):
    view = RewardLabView(RewardLab(scripted_agent(tokenizer, None, {}), ROWS, rewards={"em": exact_match}))
    assert view.sample_choice.value is None and view.reward_choice.value == "em"
    assert "no samples yet" in view.table.value and not view.advantage_plot.data
