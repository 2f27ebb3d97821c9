"""Failures are data, never a crash and never a silent success (issue 50): a group with an episode
whose environment failed before the model's first token is left out unscored and counted, and the
step goes on; a step in which every episode failed stops the run with the environment's own error;
a run that trained no group because of such failures does not end as a success, while a run whose
groups all ran with equal rewards ends with a warning."""

from __future__ import annotations

import logging

import pytest
from tiny_models import random_qwen3, save_with_tokenizer

import rlfactory_nb as rf
from rlfactory_nb.envs.adapters import OpenEnvServer, openenv_env
from rlfactory_nb.errors import EnvironmentFailed, EpisodeError
from rlfactory_nb.train.loop import train
from rlfactory_nb.train.metrics import read_metrics

from .test_adapters_loop import needs_openenv
from .test_adapters_openenv import GUESS_APP
from .test_training import config, saved

REFUSED = "refused a session: at capacity (1/1 sessions)"
OPEN: list[int] = []
"""one entry per session opened and not closed (list.append and pop are atomic across threads)"""


class Server(rf.Environment):
    """A session on a server that refuses some: the rows say which sample indices it turns away."""

    def reset(self, row, *, seed):
        if row["sample_index"] in row["refuse"]:
            raise EpisodeError("reset", REFUSED)
        OPEN.append(1)
        self.opened = True

    def close(self):
        if getattr(self, "opened", False):
            OPEN.pop()


def by_sample(sample: rf.Sample) -> float:
    """A reward that always varies within a group (the member's index)."""
    return float(sample.metadata["sample_index"] % 2)


def rows(*refused: tuple[int, ...]) -> list[dict]:
    return [{"prompt": f"Connect {i}", "ground_truth": "", "refuse": list(refuse)} for i, refuse in enumerate(refused)]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_with_tokenizer(random_qwen3(0), tmp_path_factory.mktemp("tiny-failures-qwen3"))


async def test_a_group_with_a_refused_session_is_left_out_counted_and_the_step_trains_the_others(tiny_dir, tmp_path):
    cfg = config(tiny_dir, tmp_path, grpo__steps=1, grpo__prompts_per_step=3)
    # one member of the first group is refused (the old code died here: "trajectory 1 has empty prompt_ids")
    await train(cfg, env=Server, reward={"by_sample": by_sample}, train_data=rows((1,), (), ()))
    [row] = read_metrics(cfg.run_dir)
    assert row["groups/env_failed"] == 1 and row["groups/total"] == 2 and row["groups/trained"] == 2
    assert row["env/errors/reset"] == 1 and row["rollout/trajectories"] == 8  # the scored groups only
    assert row["reward/mean"] == 0.5  # the refused group's episodes are not scored as 0s
    trajectories = saved(cfg, 1)
    left_out = [t for t in trajectories if t["metadata"]["reward"] is None]
    assert len(left_out) == 4 and {tuple(t["metadata"]["refuse"]) for t in left_out} == {(1,)}
    assert [t["metadata"]["env_error"]["message"] for t in left_out if "env_error" in t["metadata"]] == [
        f"environment failed in reset: {REFUSED}"
    ]
    assert not OPEN  # the refused group's other episodes were closed too


async def test_a_step_in_which_every_episode_failed_stops_the_run_with_the_environments_error(tiny_dir, tmp_path):
    cfg = config(tiny_dir, tmp_path, grpo__steps=3, grpo__prompts_per_step=2)
    everyone = (0, 1, 2, 3)
    with pytest.raises(EnvironmentFailed, match="every one of its 8 episodes failed.*at capacity") as raised:
        await train(cfg, env=Server, reward={"by_sample": by_sample}, train_data=rows(everyone, everyone))
    assert raised.value.kind == "reset" and read_metrics(cfg.run_dir) == []  # no step was recorded as done
    assert not OPEN


async def test_a_run_that_trained_no_group_because_of_failures_fails_and_one_with_equal_rewards_warns(
    tiny_dir, tmp_path, caplog
):
    cfg = config(tiny_dir, tmp_path / "failed", grpo__steps=1, grpo__prompts_per_step=2)
    with pytest.raises(EnvironmentFailed, match="trained no group in its 1 step.*2 groups.*at capacity"):
        await train(cfg, env=Server, reward={"by_sample": by_sample}, train_data=rows((0,), (3,)))
    [row] = read_metrics(cfg.run_dir)
    assert row["groups/env_failed"] == 2 and row["groups/trained"] == 0
    equal = config(tiny_dir, tmp_path / "equal", grpo__steps=1, grpo__prompts_per_step=2)
    with caplog.at_level(logging.WARNING, logger="rlfactory_nb.train.selection"):
        result = await train(equal, env=Server, reward={"same": lambda sample: 1.0}, train_data=rows((), ()))
    assert result.step == 1 and "trained no group in its 1 step(s): all 2 scored groups had equal rewards or only truncated" in caplog.text
    assert not OPEN


@needs_openenv
@pytest.mark.slow  # starts its own OpenEnv server: about 5-30 s on 2 busy cores
async def test_an_openenv_server_at_capacity_stops_the_run_with_the_servers_message(tiny_dir, tmp_path):
    with OpenEnvServer(GUESS_APP, env={"GUESS_MAX_SESSIONS": "1"}) as server:
        holder = openenv_env(server.url)()
        await holder.reset({"messages": []}, seed=0)  # the server's one session is taken
        try:
            cfg = config(tiny_dir, tmp_path, grpo__steps=2, grpo__prompts_per_step=2)
            games = [{"prompt": "Find my number.", "reset_args": {"low": 1, "high": 9}}] * 2
            with pytest.raises(EnvironmentFailed, match="every one of its 8 episodes failed.*at capacity"):
                await train(cfg, env=openenv_env(server.url), train_data=games)
        finally:
            await holder.close()
    assert read_metrics(cfg.run_dir) == []


@needs_openenv
@pytest.mark.slow  # starts its own OpenEnv server: about 5-30 s on 2 busy cores
async def test_an_openenv_server_short_of_sessions_gives_counted_errors_steps_that_go_on_and_a_failed_run(tiny_dir, tmp_path):
    """Three sessions for groups of four: every step starts three episodes (kept open until scored)
    and the server refuses five, so each group has a refusal; the steps go on, counted, and the run
    that trained nothing fails at its end with the server's message."""
    with OpenEnvServer(GUESS_APP, env={"GUESS_MAX_SESSIONS": "3"}) as server:
        cfg = config(tiny_dir, tmp_path, grpo__steps=2, grpo__prompts_per_step=2)
        games = [{"prompt": "Find my number.", "reset_args": {"low": 1, "high": 9}}] * 2
        with pytest.raises(EnvironmentFailed, match="trained no group in its 2 step.*at capacity"):
            await train(cfg, env=openenv_env(server.url), train_data=games)
    rows = read_metrics(cfg.run_dir)
    assert [row["step"] for row in rows] == [1, 2]
    assert all(row["env/errors/reset"] == 5 and row["groups/env_failed"] == 2 and row["env/open_now"] == 0 for row in rows)
