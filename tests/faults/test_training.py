"""Training faults: a checkpoint write that crashes, is SIGKILLed or runs out of disk leaves the
previous checkpoint intact and loadable; config mistakes fail before any worker starts; a policy
worker SIGKILLed mid-step fails the run with a message naming it, and resume continues from the last
checkpoint with no step lost or repeated."""

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from tiny_models import adam_state, random_qwen3

from rlfactory_nb.cli import main as cli_main
from rlfactory_nb.cluster import launch
from rlfactory_nb.config import ConfigError
from rlfactory_nb.data.rows import DatasetError
from rlfactory_nb.models import checkpoint as ckpt
from rlfactory_nb.models.checkpoint import CheckpointError, list_checkpoints, load_latest, save_checkpoint
from rlfactory_nb.models.policy import Policy
from rlfactory_nb.rewards import RewardRunner
from rlfactory_nb.rewards.loading import RewardLoadError
from rlfactory_nb.train import loop
from rlfactory_nb.train.loop import StepFailed, Trainer, train
from rlfactory_nb.train.metrics import read_metrics

from . import fault_rewards

ASYNC = {"grpo__max_staleness": 1, "grpo__truncate_ratio": 2.0}
"""asynchronous GRPO: step s+1's rollouts run during step s's update, so a fault lands a step earlier
or in another phase than in the synchronous loop; the run must fail as clearly and resume as exactly"""

pytestmark = pytest.mark.timeout(240)

WRITER = Path(__file__).with_name("checkpoint_writer.py")


# -- checkpoints --------------------------------------------------------------------------------------


def test_a_crash_while_writing_leaves_the_previous_checkpoint(tmp_path, tokenizer, monkeypatch):
    model = random_qwen3()
    first = save_checkpoint(tmp_path, 1, model, tokenizer, adam_state(model))

    def crash(*args, **kwargs):
        raise RuntimeError("killed mid-write")

    monkeypatch.setattr(ckpt.torch, "save", crash)
    with pytest.raises(RuntimeError, match="killed mid-write"):
        save_checkpoint(tmp_path, 2, model, tokenizer, adam_state(model))
    assert load_latest(tmp_path) == first
    assert [c.step for c in list_checkpoints(tmp_path)] == [1]
    leftovers = [p.name for p in ckpt.checkpoint_dir(tmp_path).iterdir() if p.name.startswith(".")]
    assert leftovers == []
    assert Policy.load(first.path, device="cpu").num_parameters > 0


def test_disk_full_is_a_clear_error(tmp_path, tokenizer, monkeypatch):
    model = random_qwen3()
    first = save_checkpoint(tmp_path, 1, model, tokenizer, adam_state(model))

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt.torch, "save", full)
    with pytest.raises(CheckpointError, match="disk full") as raised:
        save_checkpoint(tmp_path, 2, model, tokenizer, adam_state(model))
    assert str(first.path) in str(raised.value) and "intact" in str(raised.value)
    assert load_latest(tmp_path) == first


def test_a_dangling_latest_pointer_is_reported(tmp_path):
    ckpt.checkpoint_dir(tmp_path).mkdir(parents=True)
    (ckpt.checkpoint_dir(tmp_path) / "latest").write_text("step_000009\n")
    with pytest.raises(CheckpointError, match="not a complete checkpoint"):
        load_latest(tmp_path)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "max_staleness_1"])
async def test_resume_continues_with_no_step_lost_or_repeated(make_cfg, asynchronous):
    cfg = make_cfg(**(ASYNC if asynchronous else {}), grpo__steps=4, grpo__checkpoint_every=2)

    def crash_after_step_3(row):
        if row["step"] == 3:
            raise Crash()

    with pytest.raises(Crash):
        await train(cfg, on_step=crash_after_step_3)
    assert [row["step"] for row in read_metrics(cfg.run_dir)] == [1, 2, 3]
    assert load_latest(cfg.run_dir).step == 2
    optimizer_steps_before = sum(row.get("train/optimizer_steps", 0) for row in read_metrics(cfg.run_dir)[:2])

    resumed = []
    result = await train(cfg, resume=True, on_step=lambda row: resumed.append(row["step"]))
    assert resumed == [3, 4]
    rows = read_metrics(cfg.run_dir)
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    # the optimizer continued from the checkpoint's state rather than starting over
    optimizer_steps = optimizer_steps_before + sum(row.get("train/optimizer_steps", 0) for row in rows[2:])
    final = load_latest(cfg.run_dir)
    assert final.step == 4 and result.checkpoint == final.path
    assert final.trainer_state()["optimizer"]["state"][0]["step"] == optimizer_steps


class Crash(Exception):
    pass


def test_a_writer_killed_mid_checkpoint_leaves_the_previous_one_and_the_next_save_cleans_up(
    tmp_path, tokenizer
):
    done = subprocess.run(
        [sys.executable, str(WRITER), str(tmp_path), "kill-mid-write"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL
    leftovers = [p.name for p in ckpt.checkpoint_dir(tmp_path).iterdir() if p.name.startswith(".tmp-")]
    assert leftovers, "the killed writer left its temporary folder behind"
    assert load_latest(tmp_path).step == 1 and [c.step for c in list_checkpoints(tmp_path)] == [1]
    assert Policy.load(load_latest(tmp_path).path, device="cpu").num_parameters > 0
    save_checkpoint(tmp_path, 2, random_qwen3(), tokenizer, {})
    assert load_latest(tmp_path).step == 2
    assert not [p for p in ckpt.checkpoint_dir(tmp_path).iterdir() if p.name.startswith(".tmp-")]


def _can_mount_tmpfs() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-Urm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


@pytest.mark.skipif(
    not _can_mount_tmpfs(), reason="needs unprivileged user+mount namespaces to mount a small tmpfs"
)
@pytest.mark.parametrize(
    "size", ["1400k", "4m"], ids=["full-while-writing-weights", "full-while-writing-trainer-state"]
)
def test_a_really_full_disk_is_a_clear_error_and_the_previous_checkpoint_loads(tmp_path, size):
    mount = tmp_path / "small-disk"
    mount.mkdir()
    script = f"mount -t tmpfs -o size={size} tmpfs {mount} && {sys.executable} {WRITER} {mount}/run fill-disk"
    done = subprocess.run(
        ["unshare", "-Urm", "sh", "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert (
        seen["error"].startswith("disk full while writing checkpoint")
        and "step_000001 is intact" in seen["error"]
    )
    assert (seen["latest"], seen["loads"], seen["leftovers"]) == (1, True, [])


# -- config errors come before any worker -----------------------------------------------------------


@pytest.fixture
def no_backend(monkeypatch):
    """Fails the test if the trainer gets as far as starting a backend (Ray workers)."""
    started = []
    monkeypatch.setattr(
        loop, "make_backend", lambda *args: started.append(args) or pytest.fail("a backend was started")
    )
    return started


@pytest.mark.parametrize(
    "overrides, error, message",
    [
        ({"data__train": "no/such/prompts.jsonl"}, (DatasetError, OSError), "no/such/prompts.jsonl"),
        ({"data__train": "synthetic:calculater"}, DatasetError, "unknown synthetic dataset"),
        ({"reward__function": "no_such_reward.py:score"}, RewardLoadError, "no_such_reward.py"),
        ({"tools__config": "no/such/tools.yaml"}, ConfigError, "no/such/tools.yaml"),
    ],
    ids=["missing dataset", "unknown synthetic split", "missing reward file", "missing tools file"],
)
async def test_config_mistakes_fail_before_any_worker_starts(make_cfg, no_backend, overrides, error, message):
    cfg = make_cfg(cluster__backend="ray", cluster__num_workers=2, **overrides)
    with pytest.raises(error, match=message):
        trainer = Trainer(cfg)
        try:
            await trainer.start()
        finally:
            await trainer.close()
    assert no_backend == []


def test_launch_checks_the_config_before_starting_a_driver(make_cfg):
    cfg = make_cfg(data__train="no/such/prompts.jsonl")
    with pytest.raises((DatasetError, OSError), match="no/such/prompts.jsonl"):
        launch(cfg, cluster=object())  # never reaches the cluster


def test_a_typo_in_the_config_is_reported_by_the_cli_without_a_traceback(make_cfg, tmp_path, capsys):
    path = tmp_path / "config.yaml"
    make_cfg().to_yaml(path)
    assert cli_main(["train", str(path), "grpo.stesp=3"]) != 0
    err = capsys.readouterr().err
    assert "grpo.stesp" in err and "steps" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists(), "nothing ran"


# -- a policy worker killed mid-step ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "max_staleness_1"])
async def test_a_policy_worker_killed_mid_step_fails_clearly_and_resume_loses_no_step(
    shared_ray, make_cfg, asynchronous
):
    """Slow: two policy workers on the module's Ray, a run fails on the killed one, and a second run
    resumes it."""
    ray = shared_ray
    cfg = make_cfg(
        **(ASYNC if asynchronous else {}),
        grpo__steps=4,
        grpo__checkpoint_every=2,
        grpo__mini_batch_size=6,
        grpo__micro_batch_size=3,
        cluster__backend="ray",
        cluster__num_workers=2,
        cluster__num_engines=1,
        cluster__cpus_per_worker=0.5,
        cluster__object_store_memory_gb=0.3,
    )
    victim: dict[str, int] = {}
    calls = 0

    def kill_during_step_3(sample):
        nonlocal calls
        calls += 1
        if calls == 2 * 12 + 1:  # the first reward of step 3 (12 samples a step): the step is in flight
            os.kill(victim["pid"], signal.SIGKILL)
        return fault_rewards.first_token(sample)

    trainer = Trainer(cfg, reward=RewardRunner(kill_during_step_3))
    try:
        await trainer.start()
        victim["pid"] = ray.get(trainer.backend.workers[1].__ray_call__.remote(lambda worker: os.getpid()))
        with pytest.raises(StepFailed) as failed:
            await trainer.run()
    finally:
        await trainer.close()
    message = str(failed.value)
    found = re.search(
        rf"step (\d) failed during the (policy update|weight sync): policy worker 1 of 2 on node 127\.0\.0\.1 \(pid {victim['pid']}\) died",
        message,
    )
    assert found, message
    step = int(found.group(1))
    assert step == 3 or (asynchronous and step == 2)  # asynchronous: step 3's rewards ran during step 2
    kept = 2 if step == 3 else None
    assert (f"step_00000{kept}" if kept else "none yet") in message and "resume" in message
    assert [row["step"] for row in read_metrics(cfg.run_dir)] == list(range(1, step))
    assert (load_latest(cfg.run_dir) or SimpleNamespace(step=None)).step == kept

    resumed = []
    result = await train(cfg, resume=True, on_step=lambda row: resumed.append(row["step"]))
    assert resumed == list(range((kept or 0) + 1, 5))
    assert [row["step"] for row in read_metrics(cfg.run_dir)] == [1, 2, 3, 4]
    assert result.checkpoint == load_latest(cfg.run_dir).path and load_latest(cfg.run_dir).step == 4


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "max_staleness_1"])
async def test_an_engine_actor_killed_between_steps_fails_the_next_rollouts_clearly(
    shared_ray, make_cfg, asynchronous
):
    """Slow: on the module's Ray, a policy worker and an engine actor for two runs of steps."""
    ray = shared_ray
    cfg = make_cfg(
        **(ASYNC if asynchronous else {}),
        grpo__steps=3,
        grpo__checkpoint_every=1,
        cluster__backend="ray",
        cluster__num_workers=1,
        cluster__num_engines=1,
        cluster__cpus_per_worker=0.5,
        cluster__object_store_memory_gb=0.3,
    )
    trainer = Trainer(cfg)
    try:
        await trainer.start()
        engine = trainer.backend.engine.actors[0]
        pid = ray.get(engine.__ray_call__.remote(lambda actor: os.getpid()))

        def kill_engine_after_step_1(row):
            if row["step"] == 1:
                os.kill(pid, signal.SIGKILL)

        with pytest.raises(StepFailed) as failed:
            await trainer.run(on_step=kill_engine_after_step_1)
    finally:
        await trainer.close()
    message = str(failed.value)
    if asynchronous:  # step 2's rollouts may be done before the kill: then step 2's sync or step 3 fails
        found = re.search(
            rf"step (\d) failed during the (rollouts|weight sync): engine actor 0 on node 127\.0\.0\.1 \(pid {pid}\) died",
            message,
        )
        assert found and found.group(1) in "23", message
        assert load_latest(cfg.run_dir).step == int(found.group(1)) - 1
    else:
        assert (
            f"step 2 failed during the rollouts: engine actor 0 on node 127.0.0.1 (pid {pid}) died" in message
        )
        assert "step_000001" in message
        assert load_latest(cfg.run_dir).step == 1
    assert "resume" in message
