"""`launch(cfg, kind="sft")` checks an SFT job in the cell, before anything is submitted: the data it
would fine-tune on (`sft.data` or `train_data=`), and that no GRPO-only object is passed. No Ray is
started here: `Cluster.connect` is replaced by a function that says the job got that far."""

import json

import pytest

import rlfactory_nb as rf
from rlfactory_nb.cluster import launcher
from rlfactory_nb.cluster.job_kinds import sft_rows
from rlfactory_nb.config import RunConfig
from rlfactory_nb.errors import ConfigError, RegistryKeyError
from rlfactory_nb.models.presets import calculator
from rlfactory_nb.rollout.conversation import conversation_trajectory
from tests.train.test_sft import rows


class Submitted(Exception):
    """Raised in place of connecting to Ray: the launch passed every check in the cell."""


@pytest.fixture
def no_ray(monkeypatch):
    def connect(address=None, **options):
        raise Submitted

    monkeypatch.setattr(launcher.Cluster, "connect", connect)


def sft_config(tmp_path, **values) -> RunConfig:
    return RunConfig.from_dict({"name": "sft-check", "output_dir": str(tmp_path / "runs"), "sft": values})


def test_an_sft_job_without_data_fails_in_the_cell_naming_sft_data(no_ray, tmp_path):
    with pytest.raises(ConfigError, match=r"sft\.data: nothing to fine-tune on"):
        rf.launch(sft_config(tmp_path), kind="sft")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "does not exist"),
        ('{"prompt": "hi", "answer": "4"}\n', "neither a conversation"),
        ("not json\n", "not valid JSON"),
    ],
)
def test_unusable_sft_data_fails_in_the_cell_naming_sft_data(no_ray, tmp_path, content, problem):
    data = tmp_path / "sft.jsonl"
    if content is not None:
        data.write_text(content)
    with pytest.raises(ConfigError, match=rf"sft\.data: .*{problem}"):
        rf.launch(sft_config(tmp_path, data=str(data)), kind="sft")
    assert not (tmp_path / "runs").exists()


def test_usable_sft_data_gets_to_the_cluster(no_ray, tmp_path):
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows(2)))
    with pytest.raises(Submitted):
        rf.launch(sft_config(tmp_path, data=str(data)), kind="sft")
    with pytest.raises(Submitted):  # rows from the kernel stand in for sft.data
        rf.launch(sft_config(tmp_path), kind="sft", train_data=rows(2))


def test_grpo_objects_and_unknown_kinds_are_refused(no_ray, tmp_path):
    with pytest.raises(ConfigError, match=r"reward= belong to a GRPO job"):
        rf.launch(sft_config(tmp_path), kind="sft", train_data=rows(2), reward=lambda sample: 1.0)
    with pytest.raises(RegistryKeyError, match=r"did you mean 'sft'"):
        rf.launch(sft_config(tmp_path), kind="sfft")


def test_trajectories_travel_as_dicts_that_read_back_as_trajectories(tiny_policy):
    """rf.Trajectory objects are no rows: they travel as their dicts (`prompt_ids` marks them)."""
    messages = rows(1)[0]["messages"]
    traj = conversation_trajectory(tiny_policy.tokenizer, messages, [calculator.CALCULATOR_TOOL])
    (row,) = sft_rows([traj])
    assert rf.Trajectory.from_dict(row) == traj
    assert sft_rows(rows(1))[0]["messages"] == messages
