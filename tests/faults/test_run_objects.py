"""A run folder's objects.pkl is code: a resume loads it only when it carries this user's signature
(an HMAC keyed by a file outside every run folder), and the reward and tools the config names win
over pickled ones when the config names others (issue #32, items 1 and 13)."""

import logging
import os
import pickle
import stat

import pytest

import rlfactory_nb as rf
from rlfactory_nb.data.objects import RunObjects, trust_run_folder
from rlfactory_nb.errors import UntrustedRunObjects
from rlfactory_nb.eval import evaluate
from rlfactory_nb.signing import key_file
from rlfactory_nb.train.loop import Trainer, train


class RunsACommand:
    """What a hostile objects.pkl holds: unpickling it calls os.system."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def half(sample: rf.Sample) -> float:
    return 0.5


@pytest.fixture(autouse=True)
def own_key(tmp_path, monkeypatch):
    """This test's user key, never the machine's ~/.config one."""
    monkeypatch.setenv("RLFACTORY_NB_KEY_FILE", str(tmp_path / "keys" / "mine.key"))


def plant(run_dir, marker):
    code = run_dir / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "objects.pkl").write_bytes(pickle.dumps(RunsACommand(marker)))


async def test_a_shared_run_folders_pickle_is_refused_before_any_of_it_runs(make_cfg, tmp_path):
    cfg, marker = make_cfg(), tmp_path / "pwned"
    plant(cfg.run_dir, marker)  # a folder someone shared: a pickle, no signature
    with pytest.raises(UntrustedRunObjects, match=r"refusing to load .*objects\.pkl: it has no readable signature"):
        await train(cfg, resume=True)
    with pytest.raises(UntrustedRunObjects, match="trust_run_objects=True"):
        await evaluate(cfg.model.name, cfg=cfg, run_dir=cfg.run_dir)
    assert not marker.exists(), "resuming ran the run folder's pickle"


def test_a_swapped_pickle_or_another_users_key_is_refused_and_trust_is_explicit(make_cfg, tmp_path, monkeypatch):
    cfg, marker = make_cfg(), tmp_path / "pwned"
    RunObjects.of(reward=half).save(cfg.run_dir, config=cfg)
    key = key_file()
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and not key.is_relative_to(cfg.run_dir)
    assert RunObjects.load(cfg.run_dir).reward(None) == 0.5  # signed by this user: loads

    monkeypatch.setenv("RLFACTORY_NB_KEY_FILE", str(tmp_path / "keys" / "someone-else.key"))
    with pytest.raises(UntrustedRunObjects, match="does not match this user's key"):
        RunObjects.load(cfg.run_dir)
    assert RunObjects.load(cfg.run_dir, trust_run_objects=True).reward(None) == 0.5
    trust_run_folder(cfg.run_dir)  # after reading code/reward.py: signed with this key for good
    assert RunObjects.load(cfg.run_dir).reward(None) == 0.5

    signature = (cfg.run_dir / "code" / "objects.sig.json").read_bytes()
    plant(cfg.run_dir, marker)  # the signature kept, the pickle swapped
    assert (cfg.run_dir / "code" / "objects.sig.json").read_bytes() == signature
    with pytest.raises(UntrustedRunObjects, match="does not match"):
        RunObjects.saved_bytes(cfg.run_dir)  # what launch(resume=True) sends to the driver
    assert not marker.exists()


async def test_on_resume_the_reward_the_config_names_wins_over_the_pickled_one(make_cfg, caplog):
    started = make_cfg(reward="first_token")
    RunObjects.of(reward=half).save(started.run_dir, config=started)
    changed = make_cfg(reward="raises")  # the config now names another reward
    with caplog.at_level(logging.INFO, logger="rlfactory_nb.train.loop"):
        trainer = await Trainer(changed).start(resume=True)
    try:
        assert next(iter(trainer.reward.functions.values())).__name__ == "raises"
    finally:
        await trainer.close()
    assert "resume: reward: the config's" in caplog.text and "raises" in caplog.text

    caplog.clear()  # the same config as when the objects were saved: the pickled reward stays
    with caplog.at_level(logging.INFO, logger="rlfactory_nb.train.loop"):
        kept = RunObjects.resumed(started.run_dir, started, say=logging.getLogger("rlfactory_nb.train.loop").info)
    assert kept.reward(None) == 0.5 and "resume: reward: the pickled one" in caplog.text
