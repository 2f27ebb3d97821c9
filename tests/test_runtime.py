"""Runtime.from_config: the one place a run's tools, reward runner and Agent are built."""

from pathlib import Path

import pytest

from rlfactory_nb.config import RunConfig
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.runtime import Runtime

PACKAGE = Path(__file__).resolve().parents[1] / "rlfactory_nb"


def shout(text: str) -> str:
    """Say it louder."""
    return text.upper()


def always_one(sample) -> float:
    return 1.0


async def test_tools_are_the_kernels_with_the_configs_settings():
    cfg = RunConfig(name="x").replace({"tools.max_result_chars": 123})
    runtime = await Runtime.from_config(cfg, RunObjects.of(tools=[shout])).start()
    try:
        assert runtime.tools.settings.max_result_chars == 123 and runtime.tools.names == ["shout"]
    finally:
        await runtime.close()
    assert not runtime.tools.started
    assert Runtime.from_config(RunConfig(name="x")).tools is None


def test_a_shared_tool_cache_tier_reaches_the_tools_cache():
    """The trainer and `job.stepper()` hand the job's tier (cluster/tool_cache.py) down to here."""
    opened = []

    class Tier:
        def open(self, record_path):
            opened.append(record_path)

    tier = Tier()
    runtime = Runtime.from_config(RunConfig(name="x"), RunObjects.of(tools=[shout]), shared_cache=tier)
    assert runtime.tools.cache.shared is tier and opened == [None]


def test_the_reward_runner_is_built_on_first_use():
    """A stepper never scores: a reward the kernel cannot import must not stop it."""
    cfg = RunConfig(name="x").replace({"reward.function": "no_such_module_here:f"})
    runtime = Runtime.from_config(cfg)
    with pytest.raises(Exception, match="no_such_module_here"):
        runtime.reward  # noqa: B018
    kernel = Runtime.from_config(cfg, RunObjects.of(reward=always_one))
    assert list(kernel.reward.functions.values()) == [always_one] and kernel.reward is kernel.reward


def test_agents_at_any_temperature(tiny_policy):
    cfg = RunConfig(name="x").replace({"rollout.temperature": 0.7, "rollout.top_p": 0.9, "rollout.max_turns": 2})
    runtime = Runtime.from_config(cfg, None, tiny_policy)
    sampled, greedy = runtime.agent(), runtime.agent(0.0)
    assert (sampled.sampling.temperature, sampled.sampling.top_p, sampled.max_turns) == (0.7, 0.9, 2)
    assert (greedy.sampling.temperature, greedy.sampling.top_p) == (0.0, 1.0)
    assert sampled.tokenizer is tiny_policy.tokenizer
    with pytest.raises(ValueError, match="neither a policy nor an engine"):
        Runtime.from_config(cfg).agent()


async def test_an_engine_stands_for_the_policy(tiny_policy):
    engine = tiny_policy.engine("hf")
    try:
        runtime = Runtime.from_config(RunConfig(name="x"), None, engine)
        agent = runtime.agent()
        assert runtime.policy is None and agent.engine is engine and agent.tokenizer is engine.tokenizer
    finally:
        await engine.close()


def test_rows_are_the_kernels_else_the_configs():
    rows = [{"messages": [{"role": "user", "content": f"q{i}"}], "ground_truth": str(i)} for i in range(3)]
    kernel = Runtime.from_config(RunConfig(name="x"), RunObjects.of(train_data=rows, eval_data=rows))
    assert kernel.train_rows() == rows and kernel.train_rows(1) == rows[:1] and kernel.eval_rows() == rows
    configured = Runtime.from_config(RunConfig(name="x").replace({"data.eval_size": 2}))
    assert len(configured.eval_rows()) == 2 and len(configured.train_rows(5)) == 5


def test_the_reward_lab_samples_as_training_does(tiny_policy):
    cfg = RunConfig(name="x").replace({"grpo.group_size": 4, "grpo.scale_rewards": False, "reward.timeout_s": 9.0})
    runtime = Runtime.from_config(cfg, RunObjects.of(reward={"one": always_one}), tiny_policy)
    lab = runtime.reward_lab()
    assert (lab.group_size, lab.scale_rewards, lab.timeout_s) == (4, False, 9.0)
    assert lab.names == ["one"] and lab.rows and lab.agent.tokenizer is tiny_policy.tokenizer
    assert runtime.reward_lab(lab.rows[:2], always_one, group_size=2).group_size == 2


def test_tools_reward_runners_and_agents_are_built_only_here():
    """The issue's "no near-copy": every other module asks the Runtime (or its `build_tools`)."""
    builders = ("Agent.from_config(", "RewardRunner.from_config(", "run_tools(")
    found = [
        f"{path.relative_to(PACKAGE)}: {builder}"
        for path in PACKAGE.rglob("*.py")
        if path.name != "runtime.py"
        for builder in builders
        if builder in path.read_text(encoding="utf-8")
    ]
    assert not found, found
