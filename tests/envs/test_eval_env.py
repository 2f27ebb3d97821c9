"""`rf.evaluate(..., env=...)`: the held-out rollouts run the given Environment, one instance per
trajectory, closed at the episode's end, and its reward scores them; the given one wins over
`rollout.env` and over the one a run folder kept; a bad value fails as `train_sync`'s does.

The model is a ScriptedEngine over the tiny preset's real tokenizer, so the loop and scoring are the
ones training runs."""

from typing import ClassVar

import pytest

import rlfactory_nb as rf
from rlfactory_nb.config import RunConfig
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.engines.testing import ScriptedEngine
from rlfactory_nb.envs import Response
from rlfactory_nb.errors import ArgumentTypeError, ConfigError
from rlfactory_nb.eval import evaluate
from rlfactory_nb.models.presets.tokenizer import build_tokenizer

ROWS = [{"messages": [{"role": "user", "content": f"Task {i}"}], "ground_truth": "", "score": s} for i, s in enumerate((0.25, 0.5, 1.0))]


class Graded(rf.Environment):
    """Scores an episode with its row's `score` once the model has answered."""

    made: ClassVar[list["Graded"]] = []
    closed: ClassVar[list["Graded"]] = []

    def __init__(self):
        Graded.made.append(self)

    def reset(self, row, *, seed):
        self.score, self.answered = row["score"], False

    def respond(self, turn):
        self.answered = True
        return Response([], done=True)

    def reward(self):
        return self.score if self.answered else -3.0

    def close(self):
        Graded.closed.append(self)


class Other(rf.Environment):
    """What the config (or a run folder) names; its reward must not be the one seen."""

    def reset(self, row, *, seed):
        return None

    def reward(self):
        return -1.0


@pytest.fixture
def engine():
    Graded.made.clear()
    Graded.closed.clear()
    return ScriptedEngine(build_tokenizer(), ["All done."])


def scores(report):
    return [(row.sampled_reward, row.greedy_reward) for row in report.rows]


async def test_the_given_environment_runs_each_held_out_rollout_and_its_reward_scores_it(engine):
    report = await evaluate(engine, ROWS, RunConfig(name="eval-env"), env=Graded)
    assert scores(report) == [(0.25, 0.25), (0.5, 0.5), (1.0, 1.0)]
    assert report.sampled_reward == pytest.approx(1.75 / 3)
    assert len(Graded.made) == 6  # one per trajectory: three prompts, sampled and greedy
    assert sorted(map(id, Graded.closed)) == sorted(map(id, Graded.made))
    assert all(t.metadata["env_reward"] == row["score"] for t, row in zip(report.trajectories["greedy"], ROWS))


async def test_the_given_environment_wins_over_rollout_env_and_over_the_kept_one(engine, tmp_path):
    cfg = RunConfig(name="eval-env").replace({"rollout.env": f"{__name__}:Other"})
    assert scores(await evaluate(engine, ROWS, cfg)) == [(-1.0, -1.0)] * 3  # the config's, when none is given
    assert scores(await evaluate(engine, ROWS, cfg, env=f"{__name__}:Graded")) == [(0.25, 0.25), (0.5, 0.5), (1.0, 1.0)]
    RunObjects(env=Other).save(tmp_path, config=cfg)
    assert scores(await evaluate(engine, ROWS, RunConfig(name="eval-env"), run_dir=tmp_path)) == [(-1.0, -1.0)] * 3
    given = await evaluate(engine, ROWS, RunConfig(name="eval-env"), run_dir=tmp_path, env=Graded)
    assert scores(given) == [(0.25, 0.25), (0.5, 0.5), (1.0, 1.0)]


async def test_a_bad_env_fails_before_any_rollout_as_train_sync_says(engine):
    with pytest.raises(ArgumentTypeError, match=r"env=Graded rather than env=Graded\(\)"):
        await evaluate(engine, ROWS, RunConfig(name="eval-env"), env=Graded())
    with pytest.raises(ConfigError, match="rollout.env: environment 'no_such_module:Shop': cannot import module 'no_such_module'"):
        await evaluate(engine, ROWS, RunConfig(name="eval-env"), env="no_such_module:Shop")
    assert not engine.prompts
