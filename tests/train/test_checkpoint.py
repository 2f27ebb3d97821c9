"""Checkpoints: what they hold, pruning, resuming a finished run. Crashes and a full disk while writing,
and resume after a crash, are fault cases: tests/faults/test_training.py."""

import pytest
import torch
from tiny_models import adam_state

from rlfactory_nb.models import checkpoint as ckpt
from rlfactory_nb.models.checkpoint import list_checkpoints, load_latest, save_checkpoint
from rlfactory_nb.models.policy import Policy
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.train.loop import train

from .conftest import tiny_random_qwen3


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def test_a_checkpoint_loads_with_policy_load_and_restores_its_state(tmp_path, tokenizer, make_cfg):
    model = tiny_random_qwen3()
    state = adam_state(model, steps=2)
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


def test_keep_last_prunes_older_checkpoints(tmp_path, tokenizer):
    model = tiny_random_qwen3()
    for step in (2, 4, 6):
        save_checkpoint(tmp_path, step, model, tokenizer, {}, keep_last=2)
    assert [c.step for c in list_checkpoints(tmp_path)] == [4, 6]
    assert load_latest(tmp_path).step == 6


async def test_resume_of_a_finished_run_runs_nothing(make_cfg):
    cfg = make_cfg(grpo__steps=1)
    await train(cfg)
    result = await train(cfg, resume=True, on_step=lambda row: pytest.fail("no step should run"))
    assert result.step == 1
