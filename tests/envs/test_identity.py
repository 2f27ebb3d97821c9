"""Identity and seeds of episodes (issue 50): every trajectory has an id of its own whatever the
row's columns, so the members of a group never share a kept-open episode; the members of a group
reset their environment with one seed (the same task) and sample with their own seeds."""

from __future__ import annotations

import itertools
import re

import pytest

import rlfactory_nb as rf
from rlfactory_nb.config import RunConfig
from rlfactory_nb.engines.testing import ScriptedEngine
from rlfactory_nb.envs.adapters import textarena_env
from rlfactory_nb.envs.base import Reset
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.rollout.groups import rollout_groups
from rlfactory_nb.seeds import SampleId
from rlfactory_nb.types import Sample

TICKETS = itertools.count(1)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def named(prompt: int, sample: int) -> SampleId:
    return SampleId(seed=3, step=1, prompt=prompt, sample=sample)


class SeedsSeen(ScriptedEngine):
    """A scripted engine that records each request's sampling seed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seeds: list[int | None] = []

    async def generate(self, prompt_ids, sampling):
        self.seeds.append(sampling.seed)
        return await super().generate(prompt_ids, sampling)


class Ticket(rf.Environment):
    """Gives each episode a ticket number in its first message (the model repeats it) and draws a
    task from the reset seed."""

    def reset(self, row, *, seed):
        self.ticket, self.task = next(TICKETS), seed % 1000
        return Reset([{"role": "user", "content": f"ticket {self.ticket}"}])

    def state(self):
        return {"task": self.task}


def repeat_ticket(prompt: str) -> str:
    ticket = re.findall(r"ticket (\d+)", prompt)[-1]
    return f"<answer>{ticket}</answer>"


def rows_with_ids() -> list[dict]:
    return [{"id": f"q{i}", "messages": [{"role": "user", "content": f"question {i}"}]} for i in range(2)]


async def test_rows_with_an_id_column_give_every_trajectory_its_own_id_and_its_own_open_episode(tokenizer):
    agent = rf.Agent(None, tokenizer=tokenizer, engine=ScriptedEngine(tokenizer, repeat_ticket), env=Ticket)
    groups = await rollout_groups(agent, rows_with_ids(), 3, sample_ids=named, keep_open=True)
    trajectories = [traj for group in groups for traj in group]
    assert len({traj.id for traj in trajectories}) == 6
    assert [[traj.metadata["id"] for traj in group] for group in groups] == [["q0"] * 3, ["q1"] * 3]
    # each sample is scored against its own episode: the ticket its model read is its env's
    for traj in trajectories:
        sample = Sample.from_trajectory(traj, env=agent.env_of(traj))
        assert sample.env is not None and int(sample.final_answer) == sample.env.ticket
    await agent.close_episodes(trajectories)
    stats = agent.episode_metrics()
    assert stats["env/episodes_opened"] == stats["env/episodes_closed"] == 6 and not agent.episodes.kept


async def test_the_members_of_a_group_reset_with_one_seed_and_sample_with_their_own(tokenizer):
    engine = SeedsSeen(tokenizer, repeat_ticket)
    agent = rf.Agent(None, tokenizer=tokenizer, engine=engine, env=Ticket)
    groups = await rollout_groups(agent, rows_with_ids(), 4, sample_ids=named)
    tasks = [{traj.metadata["env_state"]["task"] for traj in group} for group in groups]
    assert [len(group_tasks) for group_tasks in tasks] == [1, 1] and tasks[0] != tasks[1]
    assert len(set(engine.seeds)) == 8  # one sampling seed per trajectory's turn, all different
    # rollout.env_seed: sample draws a task per member (the old behaviour)
    own = rf.Agent(None, tokenizer=tokenizer, engine=engine, env=Ticket, env_seed="sample")
    [group] = await rollout_groups(own, rows_with_ids()[:1], 4, sample_ids=named)
    assert len({traj.metadata["env_state"]["task"] for traj in group}) == 4


def test_the_config_names_the_env_seed(tokenizer):
    engine = ScriptedEngine(tokenizer, ["ok"])
    assert rf.Agent.from_config(RunConfig(name="x"), None, engine=engine).env_seed == "group"
    cfg = RunConfig(name="x").replace({"rollout.env_seed": "sample"})
    assert rf.Agent.from_config(cfg, None, engine=engine).env_seed == "sample"
    with pytest.raises(rf.errors.ConfigError, match="env_seed"):
        RunConfig(name="x").replace({"rollout.env_seed": "prompt"})


async def test_mastermind_siblings_play_one_secret_code_and_two_prompts_play_two(tokenizer):
    pytest.importorskip("textarena")
    engine = ScriptedEngine(tokenizer, ["[1 2 3 4]"])
    agent = rf.Agent(None, tokenizer=tokenizer, engine=engine, env=textarena_env("Mastermind-v0"), max_turns=1)
    rows = [{"id": "game", "messages": [{"role": "system", "content": "Play Mastermind."}]}] * 2
    groups = await rollout_groups(agent, rows, 4, sample_ids=named, keep_open=True)
    codes = [[tuple(agent.env_of(traj).state()["secret_code"]) for traj in group] for group in groups]
    assert [len(set(group_codes)) for group_codes in codes] == [1, 1] and codes[0][0] != codes[1][0], codes
    await agent.close_episodes()
    stats = agent.episode_metrics()
    assert stats["env/episodes_opened"] == stats["env/episodes_closed"] == 8 and stats["env/errors"] == 0


async def test_the_reward_lab_gives_a_group_one_task_as_training_does(tokenizer):
    agent = rf.Agent(None, tokenizer=tokenizer, engine=SeedsSeen(tokenizer, repeat_ticket), env=Ticket)
    lab = rf.RewardLab(agent, rows_with_ids(), rewards={"one": lambda sample: 1.0}, group_size=4)
    await lab.sample(n_prompts=2)
    tasks = [{traj.metadata["env_state"]["task"] for traj in group} for group in lab.groups]
    assert [len(group_tasks) for group_tasks in tasks] == [1, 1] and tasks[0] != tasks[1]
    assert len(set(agent.engine.seeds)) == 8  # the members still sample apart
    await agent.close_episodes()
