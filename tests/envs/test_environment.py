"""The rollout loop running an Environment: one instance per trajectory, reset from the row, bound
tools, `respond`, `reward`, `state`, masks, seeds, the bound on open instances, and `sample.env`.

The model is a ScriptedEngine (rlfactory_nb/engines/testing.py) over the real Qwen3-format tokenizer
of the tiny preset, so the token assembly is the real one."""

import asyncio
import itertools
import threading
import time
from typing import ClassVar

import pytest

import rlfactory_nb as rf
from rlfactory_nb.engines.testing import ScriptedEngine
from rlfactory_nb.envs import Reset, Response, ToolSetEnvironment
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.rollout.agent import Agent
from rlfactory_nb.rollout.groups import rollout_groups
from rlfactory_nb.seeds import SampleId
from rlfactory_nb.types import Sample

CALL = '<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


class Counter(rf.Environment):
    """A counter each episode owns: tools change it, a user asks for more until it reaches a goal."""

    closed: ClassVar[list["Counter"]] = []

    def reset(self, row, *, seed):
        self.value, self.goal, self.seed = 0, row["goal"], seed
        return [{"role": "system", "content": "Count with the tool."}] if row.get("system") else None

    @rf.tool
    def add(self, amount: int) -> str:
        """Add to the counter.

        Args:
            amount: how much to add
        """
        self.value += amount
        return f"counter={self.value}"

    def respond(self, turn):
        if self.value >= self.goal:
            return Response([{"role": "user", "content": "Thanks, done."}], done=True, speaker="user")
        return Response([{"role": "user", "content": f"Not yet: I need {self.goal}."}], speaker="user", info={"user_tokens": 5})

    def reward(self):
        return float(self.value == self.goal)

    def state(self):
        return {"value": self.value, "goal": self.goal}

    def close(self):
        Counter.closed.append(self)


def add(amount):
    return CALL.format(name="add", args=f'{{"amount": {amount}}}')


def masked_text(tokenizer, traj, sampled):
    return tokenizer.decode([i for i, m in zip(traj.response_ids, traj.loss_mask) if m == sampled])


def row(content, goal, **columns):
    return {"messages": [{"role": "user", "content": content}], "goal": goal, **columns}


async def test_an_episode_runs_tools_on_its_own_instance_and_a_user_answers_as_masked_tokens(tokenizer):
    Counter.closed.clear()
    engine = ScriptedEngine(tokenizer, {"count to 3": [add(3), "Done at 3."], "count to 5": [add(2), "Two.", add(3), "Five."]})
    agent = Agent(None, engine=engine, tokenizer=tokenizer, env=Counter, max_turns=6)
    three, five = await asyncio.gather(agent.rollout(row("count to 3", 3)), agent.rollout(row("count to 5", 5)))

    assert three.finish_reason == five.finish_reason == "stop"
    assert [t.results[0].content for t in five.turns if t.results] == ["counter=2", "counter=5"]  # no shared state
    assert three.metadata["env_reward"] == five.metadata["env_reward"] == 1.0
    assert five.metadata["goal"] == 5 and five.metadata["user_tokens"] == 5
    # the user's reply to "Two." is a masked delta; the model's texts are the only sampled tokens
    assert five.turns[1].speaker == "user" and five.turns[1].replies[0]["content"] == "Not yet: I need 5."
    assert "Not yet: I need 5." in masked_text(tokenizer, five, 0)
    assert "Not yet" not in masked_text(tokenizer, five, 1) and "Two." in masked_text(tokenizer, five, 1)
    assert sum(five.loss_mask) == len(five.logprobs)
    assert [m["role"] for m in five.messages] == ["user", "assistant", "tool", "assistant", "user", "assistant", "tool", "assistant"]
    # the tools in the prompt are the instance's (self left out); the state is shown after each step
    assert '"name": "add"' in engine.prompts[0] and '"self"' not in engine.prompts[0]
    assert [t.state for t in five.turns] == [{"value": 2, "goal": 5}, {"value": 2, "goal": 5}, {"value": 5, "goal": 5}, {"value": 5, "goal": 5}]
    assert five.metadata["env_state"] == {"value": 0, "goal": 5}
    assert len(Counter.closed) == 2 and len({id(env) for env in Counter.closed}) == 2
    assert agent.episode_metrics()["env/episodes_closed"] == 2.0 and agent.episode_metrics()["env/user_tokens"] == 5.0
    assert not agent.episodes.stats.errors and agent.drift_count == 0


async def test_reset_sees_the_row_adds_or_replaces_the_prompt_and_is_seeded_by_the_sample_id(tokenizer):
    seeds = []

    class Opening(rf.Environment):
        def reset(self, row, *, seed):
            seeds.append(seed)
            if row.get("replace"):
                return Reset([{"role": "user", "content": "a new prompt from the env"}], replace_prompt=True)
            return Reset([{"role": "user", "content": "and an addition"}])

    engine = ScriptedEngine(tokenizer, ["ok"])
    agent = Agent(None, engine=engine, tokenizer=tokenizer, env=Opening)
    sample = SampleId(seed=7, step=1, prompt=0, sample=2)
    added = await agent.rollout(row("first", 0), sample_id=sample)
    replaced = await agent.rollout(row("second", 0, replace=True), sample_id=sample)
    assert [m["content"] for m in added.messages[:2]] == ["first", "and an addition"]
    assert replaced.messages[0]["content"] == "a new prompt from the env" and "second" not in engine.prompts[1]
    assert seeds[0] == seeds[1] == sample.reset_seed() and seeds[0] != sample.turn_seed(0)
    # a sibling in the group resets with the same seed (the same task); another prompt's group does not
    sibling = await agent.rollout(row("third", 0), sample_id=SampleId(7, 1, 0, 3))
    await agent.rollout(row("fourth", 0), sample_id=SampleId(7, 1, 1, 2))
    assert seeds[2] == seeds[0] != seeds[3] and sibling.finish_reason == "stop"
    # rollout.env_seed: sample gives each member its own
    own = Agent(None, engine=engine, tokenizer=tokenizer, env=Opening, env_seed="sample")
    await own.rollout(row("fifth", 0), sample_id=sample)
    await own.rollout(row("sixth", 0), sample_id=SampleId(7, 1, 0, 3))
    assert seeds[4] == sample.turn_seed(-1) != seeds[5] and seeds[4] != seeds[0]


async def test_plain_messages_still_roll_out_and_the_default_environment_is_the_toolset(tokenizer):
    engine = ScriptedEngine(tokenizer, ["<answer>4</answer>"])
    agent = Agent(None, None, engine=engine, tokenizer=tokenizer)
    session = agent.start([{"role": "user", "content": "2+2?"}], {"ground_truth": "4"})
    assert isinstance(session.env, ToolSetEnvironment) and session.trajectory.prompt_ids  # ready before a step
    traj = await session.run()
    assert traj.finish_reason == "stop" and traj.metadata == {"ground_truth": "4", "drift_position": -1,
                                                              "dropped_think_blocks": 0, "rewritten_tokens": 0}


async def test_kept_open_environments_are_seen_by_rewards_as_sample_env_then_closed(tokenizer):
    Counter.closed.clear()
    engine = ScriptedEngine(tokenizer, {"count": [add(2), "Done."]})
    agent = Agent(None, engine=engine, tokenizer=tokenizer, env=Counter, max_turns=4)
    groups = await rollout_groups(agent, [row("count to 2", 2), row("count to 9", 9)], group_size=2, keep_open=True)
    assert len(agent.episodes.kept) == 4 and not Counter.closed
    samples = [Sample.from_trajectory(traj, env=agent.env_of(traj)) for group in groups for traj in group]
    assert [sample.env.value for sample in samples] == [2, 2, 2, 2]  # the state the agent left behind
    assert [sample.env.goal for sample in samples] == [2, 2, 9, 9]
    await agent.close_episodes()
    assert len(Counter.closed) == 4 and not agent.episodes.kept
    assert agent.episodes.stats.open_now == 0


async def test_at_most_max_open_envs_episodes_run_at_once_and_creation_stays_off_the_event_loop(tokenizer):
    live, peak, lock = [0], [0], threading.Lock()

    class Slow(rf.Environment):
        def __init__(self):
            time.sleep(0.2)  # a blocking start (a database copy, a browser): must not stall the loop
            with lock:
                live[0] += 1
                peak[0] = max(peak[0], live[0])

        async def respond(self, turn):
            await asyncio.sleep(0.05)

        def close(self):
            with lock:
                live[0] -= 1

    ticks = []

    async def heartbeat():
        while True:
            ticks.append(time.perf_counter())
            await asyncio.sleep(0.01)

    agent = Agent(None, engine=ScriptedEngine(tokenizer, ["hi"]), tokenizer=tokenizer, env=Slow, max_open_envs=4)
    beat = asyncio.ensure_future(heartbeat())
    started = time.perf_counter()
    await rollout_groups(agent, [row("x", 0)], group_size=12)
    elapsed = time.perf_counter() - started
    beat.cancel()
    assert peak[0] <= 4 and live[0] == 0
    assert elapsed < 12 * 0.2  # made four at a time in worker threads, not one after another
    assert max(b - a for a, b in itertools.pairwise(ticks)) < 0.15  # the loop kept running meanwhile
    assert agent.episodes.stats.opened == agent.episodes.stats.closed == 12


def test_an_environment_instance_given_for_a_factory_is_refused_with_the_fix():
    with pytest.raises(TypeError, match="env=Counter rather than env=Counter()|e.g. env=Shop"):
        Agent(None, engine=object(), tokenizer=build_tokenizer(), env=Counter())
    with pytest.raises(ValueError, match="module:Class"):
        Agent(None, engine=object(), tokenizer=build_tokenizer(), env="no_colon_here")


async def test_bound_tools_validate_arguments_and_a_raising_tool_is_a_result_the_model_reads(tokenizer):
    class Fragile(rf.Environment):
        @rf.tool
        def divide(self, a: int, b: int) -> float:
            """Divide a by b."""
            return a / b

    engine = ScriptedEngine(tokenizer, [CALL.format(name="divide", args='{"a": 1, "b": 0}'), CALL.format(name="divide", args='{"a": 1}'), "ok"])
    traj = await Agent(None, engine=engine, tokenizer=tokenizer, env=Fragile, max_turns=4).rollout(row("divide", 0))
    assert [(r.status, r.content.split(":")[0]) for t in traj.turns for r in t.results] == [
        ("error", "ZeroDivisionError"), ("invalid_args", "invalid arguments for divide")]
    assert traj.finish_reason == "stop" and "env_error" not in traj.metadata


async def test_an_environment_can_end_the_episode_after_a_tool_call(tokenizer):
    class OneMove(rf.Environment):
        @rf.tool
        def move(self) -> str:
            """Make the winning move."""
            self.won = True
            return "you won"

        def finished(self):
            return getattr(self, "won", False)

    engine = ScriptedEngine(tokenizer, [CALL.format(name="move", args="{}"), "never asked"])
    traj = await Agent(None, engine=engine, tokenizer=tokenizer, env=OneMove, max_turns=4).rollout(row("play", 0))
    assert traj.finish_reason == "stop" and traj.num_turns == 1 and traj.turns[0].results[0].content == "you won"
    assert len(engine.prompts) == 1 and traj.messages[-1]["role"] == "assistant"  # the result is not fed back


async def test_the_reward_lab_scores_with_the_open_environments_and_closes_them_at_the_next_sample(tokenizer):
    Counter.closed.clear()
    engine = ScriptedEngine(tokenizer, {"count": [add(2), "Done."]})
    agent = Agent(None, engine=engine, tokenizer=tokenizer, env=Counter, max_turns=4)
    lab = rf.RewardLab(agent, [row("count to 2", 2), row("count to 5", 5)], {"left": lambda s: s.env.goal - s.env.value}, group_size=2)
    await lab.sample(n_prompts=2)
    assert [[o.score for o in group] for group in lab.outcomes] == [[0.0, 0.0], [3.0, 3.0]] and not Counter.closed
    await lab.rescore(twice=lambda s: 2.0 * s.env.value)
    assert [o.components["twice"] for group in lab.outcomes for o in group] == [4.0] * 4
    await lab.sample(n_prompts=1)
    assert len(Counter.closed) == 4 and len(agent.episodes.kept) == 2
    await agent.close_episodes()
