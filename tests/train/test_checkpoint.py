"""Checkpoints: atomic writes, a clear disk-full error, pruning, and resume with no step lost or repeated."""

import errno

import pytest
import torch

from rlfactory_nb.policy import Policy
from rlfactory_nb.presets.tokenizer import build_tokenizer
from rlfactory_nb.train import checkpoint as ckpt
from rlfactory_nb.train.checkpoint import CheckpointError, list_checkpoints, load_latest, save_checkpoint
from rlfactory_nb.train.loop import train
from rlfactory_nb.train.metrics import read_metrics

from .conftest import tiny_random_qwen3


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def optimizer_state(model, steps: int = 1):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(steps):
        model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
        optimizer.step()
    return optimizer.state_dict()


def test_a_checkpoint_loads_with_policy_load_and_restores_its_state(tmp_path, tokenizer, make_cfg):
    model = tiny_random_qwen3()
    state = optimizer_state(model, steps=2)
    saved = save_checkpoint(tmp_path, 7, model, tokenizer, state, make_cfg())
    assert load_latest(tmp_path) == saved and saved.path.name == "step_000007"
    policy = Policy.load(saved.path, device="cpu")
    for name, tensor in model.state_dict().items():
        assert torch.equal(policy.model.state_dict()[name], tensor), name
    assert policy.tokenizer.chat_template == tokenizer.chat_template
    trainer_state = saved.trainer_state()
    assert trainer_state["step"] == 7
    assert trainer_state["optimizer"]["state"][0]["step"] == state["state"][0]["step"] == 2
    assert (saved.path / ckpt.RUN_CONFIG).exists()


def test_a_crash_while_writing_leaves_the_previous_checkpoint(tmp_path, tokenizer, monkeypatch):
    model = tiny_random_qwen3()
    first = save_checkpoint(tmp_path, 1, model, tokenizer, optimizer_state(model))

    def crash(*args, **kwargs):
        raise RuntimeError("killed mid-write")

    monkeypatch.setattr(ckpt.torch, "save", crash)
    with pytest.raises(RuntimeError, match="killed mid-write"):
        save_checkpoint(tmp_path, 2, model, tokenizer, optimizer_state(model))
    assert load_latest(tmp_path) == first
    assert [c.step for c in list_checkpoints(tmp_path)] == [1]
    leftovers = [p.name for p in ckpt.checkpoint_dir(tmp_path).iterdir() if p.name.startswith(".")]
    assert leftovers == []
    assert Policy.load(first.path, device="cpu").num_parameters > 0


def test_disk_full_is_a_clear_error(tmp_path, tokenizer, monkeypatch):
    model = tiny_random_qwen3()
    first = save_checkpoint(tmp_path, 1, model, tokenizer, optimizer_state(model))

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt.torch, "save", full)
    with pytest.raises(CheckpointError, match="disk full") as raised:
        save_checkpoint(tmp_path, 2, model, tokenizer, optimizer_state(model))
    assert str(first.path) in str(raised.value) and "intact" in str(raised.value)
    assert load_latest(tmp_path) == first


def test_keep_last_prunes_older_checkpoints(tmp_path, tokenizer):
    model = tiny_random_qwen3()
    for step in (2, 4, 6):
        save_checkpoint(tmp_path, step, model, tokenizer, {}, keep_last=2)
    assert [c.step for c in list_checkpoints(tmp_path)] == [4, 6]
    assert load_latest(tmp_path).step == 6


def test_a_dangling_latest_pointer_is_reported(tmp_path):
    ckpt.checkpoint_dir(tmp_path).mkdir(parents=True)
    (ckpt.checkpoint_dir(tmp_path) / "latest").write_text("step_000009\n")
    with pytest.raises(CheckpointError, match="not a complete checkpoint"):
        load_latest(tmp_path)


class Crash(Exception):
    pass


async def test_resume_continues_with_no_step_lost_or_repeated(make_cfg):
    cfg = make_cfg(grpo__steps=4, grpo__checkpoint_every=2)

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


async def test_resume_of_a_finished_run_runs_nothing(make_cfg):
    cfg = make_cfg(grpo__steps=1)
    await train(cfg)
    result = await train(cfg, resume=True, on_step=lambda row: pytest.fail("no step should run"))
    assert result.step == 1
