"""Every shipped example through notebooks 01 and 02: the demo prompt and the call tried by hand
are the example's own (no `unknown_tool`), and the lab scores with the example's rewards, none of
another example's (examples/<name>/notebook.yaml)."""

import asyncio
import json

import pytest

import rlfactory_nb as rf
from rlfactory_nb.notebooks_run import run_notebooks

from .conftest import CELL_TIMEOUT_S

pytestmark = pytest.mark.slow

EXAMPLES = ("calculator", "gsm8k", "nl2sql", "deepsearch", "shop", "guess", "agents_sdk")
ENV_EXAMPLES = ("shop", "guess")
"""their tools are each episode's (rollout.env), their reward the episode's own"""
NOTEBOOKS = ("01_setup_tools.ipynb", "02_reward_design.ipynb")


def tagged_output(path, tag: str) -> str:
    """The text a cell printed or showed: the cell tagged `tag`, or with the id `tag`."""
    cells = json.loads(path.read_text())["cells"]
    (cell,) = [c for c in cells if tag in c.get("metadata", {}).get("tags", []) or c.get("id") == tag]
    texts = []
    for output in cell.get("outputs", []):
        texts.append(output.get("text", "") if "text" in output else output.get("data", {}).get("text/plain", ""))
    return "".join("".join(t) if isinstance(t, list) else t for t in texts)


def trained_reward(example) -> str:
    """The reward spec the example's run trains with: an environment's own, or reward.function."""
    if example.runtime().env_reward_use() == "reward":
        return "rlfactory_nb.envs.base:env_reward"
    return example.config().reward.function


async def open_tool_names(example) -> list[str]:
    tools = await example.open_tools()
    try:
        return tools.names
    finally:
        await tools.stop()


def test_every_example_declares_notebook_defaults_that_fit_it():
    """Fast twin of the slow test below: the call names a tool of the example (of one open episode
    for an environment; none where the example has no tools), the first lab reward is the one its
    run trains with."""
    for name in EXAMPLES:
        example = rf.example(name)
        defaults = example.notebook
        names = asyncio.run(open_tool_names(example))
        if defaults.tool_call is None:
            assert names == [], f"{name}: has tools {names} but declares no call to try"
        else:
            assert defaults.tool_call["name"] in names, f"{name}: no tool {defaults.tool_call['name']!r} in {names}"
        assert next(iter(defaults.lab_rewards.values())) == trained_reward(example), name
        assert example.demo_messages()[-1] == {"role": "user", "content": defaults.demo_prompt}
        assert example.eval_rows(2)


def test_an_environment_example_rolls_out_a_row_its_episode_can_reset_with():
    for name in ENV_EXAMPLES:
        example = rf.example(name)
        demo = example.demo_input()
        assert isinstance(demo, dict) and demo["messages"][-1]["content"] == example.notebook.demo_prompt
        assert set(example.dataset("train", 1)[0]) <= set(demo), name
    assert isinstance(rf.example("calculator").demo_input(), list)


async def call_by_hand(name: str):
    example = rf.example(name)
    tools = await example.open_tools()
    try:
        return await example.call_by_hand(tools)
    finally:
        await tools.stop()


def test_the_call_by_hand_runs_on_one_open_episode_or_says_why_there_is_none():
    result = asyncio.run(call_by_hand("shop"))
    assert result.status == "ok" and "ana silva" in result.content.lower(), result  # the row's customer's orders
    assert "no tool to call by hand" in asyncio.run(call_by_hand("guess"))


def test_the_notebooks_agent_is_the_one_the_examples_run_builds(tiny_policy):
    """A tools example: the loop over its ToolSet; an environment example: the loop over its episodes
    (the tools of the episode opened by hand unused); agents_sdk: its agent program on the tools."""
    from rlfactory_nb.recipes.shop.env import Shop

    def agent_of(name):
        example = rf.example(name)
        return example.agent(example.config(), tiny_policy, example.tools() if name != "shop" else None)

    calculator = agent_of("calculator")
    assert isinstance(calculator, rf.Agent) and calculator.episodes.shared and calculator.tools is not None
    shop = agent_of("shop")
    assert isinstance(shop, rf.Agent) and shop.episodes.factory is Shop
    program = agent_of("agents_sdk")
    assert isinstance(program, rf.AgentProgram) and program.fn.__name__ == "solve" and program.tools is not None
    assert program.chat_format.name == calculator.chat_format.name and program.enable_thinking is False


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", EXAMPLES)
def test_notebooks_01_and_02_serve_the_example(name, tmp_path, tiny_policy):
    parameters = {"example": name, "n_prompts": 2, "group_size": 2, "max_new_tokens": 32}
    executed = run_notebooks(tmp_path, parameters, notebooks=NOTEBOOKS, html=False, timeout_s=CELL_TIMEOUT_S)
    for path in executed:
        errors = [o for c in json.loads(path.read_text())["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
        assert not errors, f"{name} {path.name}: {errors}"
    by_hand = tagged_output(executed[0], "tool-call-by-hand")
    if rf.example(name).notebook.tool_call is None:
        assert "no tool to call by hand" in by_hand, by_hand
    else:
        assert "unknown_tool" not in by_hand and "status='ok'" in by_hand, by_hand
    if name in ENV_EXAMPLES:  # the rollout ran the example's environment, not a ToolSet
        assert "environment reward:" in tagged_output(executed[0], "01-08")
    example_rewards = list(rf.example(name).notebook.lab_rewards)
    (line,) = [line for line in tagged_output(executed[1], "lab-rewards").splitlines() if line.startswith("lab rewards:")]
    assert line == "lab rewards: " + ", ".join([*example_rewards, "used_tool", "shaped"]), line


def test_notebook_03_shows_what_the_config_changes_not_the_whole_yaml():
    example = rf.example("calculator")
    changes = example.changes(example.config({"grpo.steps": 2, "model.lora": {"rank": 4, "alpha": 8}}))
    assert [key for key, _, _ in changes.rows] == ["grpo.steps", "model.lora"]
    assert repr(changes).splitlines()[1] == "  grpo.steps: 40 -> 2" and len(repr(changes).splitlines()) == 3
    assert "<code>grpo.steps</code>" in changes._repr_html_()
    assert "unchanged" in repr(example.changes(example.config()))
