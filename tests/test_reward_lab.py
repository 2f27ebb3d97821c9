"""RewardLab: scores side by side, GRPO advantages per group, the warnings that matter, and the
reward handed to training. Its view is tested in tests/widgets/test_reward_lab.py."""

import itertools

import pandas as pd
import pytest
import torch
from rollout.scripted import ScriptedEngine  # tests/ is on sys.path (rootdir-relative packages)
from widgets.conftest import CALL, add, scripted_agent

from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.reward_lab import LabWarnings, RewardLab
from rlfactory_nb.rewards import exact_match, group_reward
from rlfactory_nb.tools import ToolSet

ROWS = [
    {"messages": [{"role": "user", "content": "What is 2+3?"}], "ground_truth": "5"},
    {"messages": [{"role": "user", "content": "What is 4+4?"}], "ground_truth": "8"},
]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture
async def tools():
    async with ToolSet.from_functions(add) as toolset:
        yield toolset


def alternating(tokenizer):
    """Replies that differ within a group: every other sample answers right, the others wrong."""
    calls = itertools.count()

    def reply(prompt):
        right = "<answer>5</answer>" if "2+3" in prompt else "<answer>8</answer>"
        return right if next(calls) % 2 == 0 else "<answer>0</answer>"

    return ScriptedEngine(tokenizer, reply)


def constant(sample):
    return 1.0


async def test_scores_advantages_warnings_and_the_table(tokenizer, tools):
    agent = scripted_agent(tokenizer, tools, {})
    agent._engine = alternating(tokenizer)
    lab = RewardLab(agent, ROWS, rewards={"em": exact_match, "constant": constant}, group_size=4)
    assert lab.table().empty and list(lab.table().columns)[-1] == "errors" and lab.warnings() == []
    await lab.sample(n_prompts=2)
    scores = lab.scores("em")
    assert scores.shape == (2, 4) and scores.sum() == 4  # half right in every group
    advantages = lab.advantages("em")
    assert torch.allclose(advantages.sum(dim=1), torch.zeros(2), atol=1e-5) and (advantages.abs() > 0.9).all()
    assert lab.advantages("constant").abs().sum() == 0
    warnings = lab.warnings()
    assert any("'constant' is 1 for every sample" in w for w in warnings)
    assert any("no tool call fired" in w for w in warnings)
    assert not any("'em'" in w for w in warnings)
    table = lab.table()
    assert isinstance(table, pd.DataFrame) and len(table) == 8
    assert {"em", "constant", "advantage", "answer", "ground_truth"} <= set(table.columns)
    assert table.groupby("prompt")["em"].sum().tolist() == [2.0, 2.0]


def test_warnings_read_as_a_list_and_stay_strings():
    warnings = LabWarnings(["reward 'x' is 1 for every sample", "a <b> tag"])
    assert warnings == ["reward 'x' is 1 for every sample", "a <b> tag"] and all(isinstance(w, str) for w in warnings)
    assert repr(warnings) == "- reward 'x' is 1 for every sample\n- a <b> tag"
    assert "<li>a &lt;b&gt; tag</li>" in warnings._repr_html_()
    assert repr(LabWarnings()).startswith("no warnings")


async def test_rescore_uses_the_edited_function_on_the_same_rollouts(tokenizer, tools):
    agent = scripted_agent(tokenizer, tools, {"+": [CALL.format(a=2, b=3), "<answer>5</answer>"]})
    lab = RewardLab(agent, ROWS, rewards={"em": exact_match}, group_size=2)
    await lab.sample(n_prompts=2)
    rescored = []
    lab.on_change(lambda: rescored.append(True))
    rollouts = [traj.id for group in lab.groups for traj in group]
    assert any("zero variance" in w for w in lab.warnings()) and not any("no tool call" in w for w in lab.warnings())

    def em(sample):
        raise KeyError("answer")

    await lab.rescore(em=em)
    assert [traj.id for group in lab.groups for traj in group] == rollouts and rescored == [True]
    assert lab.scores("em").sum() == 0 and any("failed and scored 0" in w for w in lab.warnings())
    assert "KeyError" in lab.table()["errors"][0]


def test_group_size_one_is_refused(tokenizer):
    with pytest.raises(ValueError, match="group_size"):
        RewardLab(scripted_agent(tokenizer, None, {}), ROWS, rewards=exact_match, group_size=1)


def test_the_lab_hands_its_reward_to_training_and_to_another_kernel(tmp_path):
    def mine(sample):
        return 0.5

    @group_reward
    def ranked(samples):
        return [float(i) for i in range(len(samples))]

    lab = RewardLab(agent=None, dataset=[], rewards={"em": exact_match, "mine": mine, "ranked": ranked})
    assert lab.reward("mine") is mine and list(lab.reward("mine", "em")) == ["mine", "em"]
    assert list(lab.reward()) == ["em", "mine", "ranked"]
    with pytest.raises(KeyError, match="no reward 'nope'"):
        lab.reward("nope")
    path = lab.save_reward(tmp_path / "chosen.pkl", "mine", "ranked")
    loaded = RewardLab.load_reward(path)
    assert loaded["mine"](None) == 0.5 and loaded["ranked"].group_reward is True
    assert "def mine" in path.with_suffix(".py").read_text()


async def test_a_call_that_did_not_parse_is_not_reported_as_never_trying(tokenizer, tools):
    """The model wrote a tool call the parser rejected: the warning says it tried, and the errors
    column shows the parse error (not only reward errors)."""
    broken = '<tool_call>\n{"name": "add", "arguments": {"a": 2,\n</tool_call>'
    agent = scripted_agent(tokenizer, tools, {"+": [broken, "<answer>5</answer>"]})
    lab = RewardLab(agent, ROWS, rewards={"em": exact_match}, group_size=2)
    await lab.sample(n_prompts=2)
    (warning,) = [w for w in lab.warnings() if "no tool call fired" in w]
    assert "the model tried in 4 of them" in warning and "never tried" not in warning
    assert all(cell.startswith("tool call did not parse: ") for cell in lab.table()["errors"])
    never = RewardLab(scripted_agent(tokenizer, tools, {"+": ["<answer>5</answer>"]}), ROWS, rewards={"em": exact_match}, group_size=2)
    await never.sample(n_prompts=2)
    assert any("never tried to call a tool" in w for w in never.warnings()) and set(never.table()["errors"]) == {""}
