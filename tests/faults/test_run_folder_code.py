"""Everything a run folder names that runs code follows one rule: it is used only when it carries
this user's signature (issue #54, items 1 and 14). A checkpoint's run_config.yaml names a program
file, an environment module and a tools file whose servers start; `job.stepper()` on a folder
without objects.pkl builds its run from it. And on resume the config wins over a pickled
environment or program, as it does over a pickled reward."""

import logging
import os
import pickle

import pytest
from tiny_models import random_qwen3

from rlfactory_nb.cluster.jobs import TrainingJob
from rlfactory_nb.data.objects import RunObjects, trust_run_folder
from rlfactory_nb.envs.base import Environment
from rlfactory_nb.errors import UntrustedRunObjects
from rlfactory_nb.models.checkpoint import save_checkpoint
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.programs.program import AgentProgram
from rlfactory_nb.reward_lab import RewardLab
from rlfactory_nb.signing import sign_file
from rlfactory_nb.train.run_folder import RunFolder


@pytest.fixture(autouse=True)
def own_key(tmp_path, monkeypatch):
    """This test's user key, never the machine's ~/.config one."""
    monkeypatch.setenv("RLFACTORY_NB_KEY_FILE", str(tmp_path / "keys" / "mine.key"))


class Pickled(Environment):
    pass


def play(row, llm):
    return "pickled"


def planted_program(tmp_path):
    """A program file whose import leaves a marker: what a hostile run_config.yaml names."""
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil_program.py"
    evil.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n\ndef play(row, llm):\n    return ''\n")
    return f"{evil}:play", marker


def finished_job(cfg, monkeypatch):
    """The run folder as `TrainingJob.attach` finds it with no driver; its engine is not the point."""
    RunFolder(cfg.run_dir).write_status(state="finished", step=1)
    monkeypatch.setattr(TrainingJob, "engine", lambda self, **options: None)
    return TrainingJob.attach(cfg.name, output_dir=cfg.run_dir.parent)


def test_a_run_config_planted_in_a_shared_folder_builds_no_run(make_cfg, tmp_path, monkeypatch):
    cfg = make_cfg()
    program, marker = planted_program(tmp_path)
    checkpoint = cfg.run_dir / "checkpoints" / "step_000001"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.pt").write_bytes(b"")
    cfg.replace({"rollout.program": program}).to_yaml(checkpoint / "run_config.yaml")  # no objects.pkl, no signature
    job = finished_job(cfg, monkeypatch)
    with pytest.raises(UntrustedRunObjects, match=r"run_config\.yaml: it has no readable signature.*rollout\.program='"):
        job.stepper()
    assert not marker.exists(), "job.stepper() ran the program a planted run_config.yaml named"
    with pytest.raises(UntrustedRunObjects, match="mine.key|trust_run_objects=True"):
        job.config()


def test_the_checkpoints_config_is_signed_and_a_changed_one_is_refused(make_cfg, tmp_path, monkeypatch):
    cfg = make_cfg()
    saved = save_checkpoint(cfg.run_dir, 1, random_qwen3(), build_tokenizer(), {}, cfg)
    job = finished_job(cfg, monkeypatch)
    assert job.config().rollout.program is None  # signed by the writer with this user's key

    program, marker = planted_program(tmp_path)
    cfg.replace({"rollout.program": program}).to_yaml(saved.path / "run_config.yaml")  # the signature kept
    with pytest.raises(UntrustedRunObjects, match=r"does not match this user's key \(.*mine\.key\)"):
        job.stepper()
    assert not marker.exists()
    assert job.config(trust_run_objects=True).rollout.program == program  # trust is explicit
    trust_run_folder(cfg.run_dir)  # after reading what it names: signed for good
    assert job.config().rollout.program == program


def test_on_resume_the_env_and_program_the_config_names_win_over_the_pickled_ones(make_cfg, caplog):
    started = make_cfg()
    RunObjects.of(env=Pickled, agent=AgentProgram(play)).save(started.run_dir, config=started)
    changed = started.replace({"rollout.env": "rlfactory_nb.envs.base:Environment", "rollout.program": "x.py:play"})
    say = logging.getLogger("resume").info
    with caplog.at_level(logging.INFO, logger="resume"):
        resumed = RunObjects.resumed(changed.run_dir, changed, say=say)
    assert resumed.env is None and resumed.agent is None, "the pickled env or program won over the config"
    assert "env: the config's 'rlfactory_nb.envs.base:Environment'" in caplog.text
    assert "agent: the config's 'x.py:play'" in caplog.text

    kept = RunObjects.resumed(started.run_dir, started, say=say)  # the same config: the pickled ones stay
    assert kept.env is Pickled and kept.agent is not None


def test_a_lab_reward_planted_under_runs_is_refused_before_it_is_unpickled(tmp_path):
    """Notebook 02 saves the lab's reward under `runs/` and notebook 03 loads it: the same rule."""
    marker, path = tmp_path / "pwned", tmp_path / "runs" / "lab_reward.pkl"
    path.parent.mkdir()

    class RunsACommand:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path.write_bytes(pickle.dumps(RunsACommand()))
    with pytest.raises(UntrustedRunObjects, match=r"lab_reward\.pkl: it has no readable signature.*lab_reward\.py"):
        RewardLab.load_reward(path, if_missing=None)
    assert not marker.exists(), "load_reward unpickled a file nobody signed"

    data = RunObjects.of(reward=play).dumps()  # what save_reward writes, signed by this user
    path.write_bytes(data)
    sign_file(path, data)
    assert RewardLab.load_reward(path)({}, None) == "pickled"
    path.write_bytes(pickle.dumps(RunsACommand()))  # swapped after signing
    with pytest.raises(UntrustedRunObjects, match="does not match"):
        RewardLab.load_reward(path)
    assert not marker.exists()
