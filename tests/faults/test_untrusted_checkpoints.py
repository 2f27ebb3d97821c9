"""Checkpoints are files people download and share: resuming or loading one runs no code from it,
and changed or damaged bytes are a CheckpointError naming the file (issue #19, items 1 and 14)."""

import asyncio
import os
import pickle

import pytest
import torch
from tiny_models import random_qwen3

from rlfactory_nb.models import checkpoint as ckpt
from rlfactory_nb.models.checkpoint import CheckpointError, save_checkpoint, write_digests
from rlfactory_nb.models.policy import Policy
from rlfactory_nb.train.loop import train


class RunsACommand:
    """What a hostile trainer_state.pt holds: unpickling it calls os.system."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture
def saved(make_cfg, tokenizer):
    """Step 1's checkpoint of the run `make_cfg()` describes."""
    model = random_qwen3()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()
    return save_checkpoint(make_cfg().run_dir, 1, model, tokenizer, optimizer.state_dict())


def test_a_checkpoint_round_trips_its_optimizer_and_rng_under_weights_only(saved):
    state = saved.trainer_state()
    assert state["step"] == 1 and state["optimizer"]["state"][0]["step"] == 1
    ckpt.restore_rng(state["rng"])  # numpy's RNG state included


@pytest.mark.parametrize("digests_rewritten", [False, True])
def test_resuming_a_checkpoint_that_carries_code_runs_none_of_it(
    saved, tmp_path, make_cfg, digests_rewritten
):
    marker = tmp_path / "pwned"
    with (saved.path / ckpt.TRAINER_STATE).open("wb") as file:
        pickle.dump({"step": 1, "optimizer": RunsACommand(marker), "rng": {}}, file)
    if digests_rewritten:  # an attacker who ships the whole folder also ships matching digests
        (saved.path / ckpt.DIGESTS).unlink()
        write_digests(saved.path)
    with pytest.raises(CheckpointError, match="trainer_state.pt"):
        asyncio.run(train(make_cfg(), resume=True))
    assert not marker.exists(), "unpickling the checkpoint ran a command"


def test_flipped_weight_bytes_fail_the_digest_on_resume_and_on_load(saved):
    weights = saved.path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-100] ^= 0xFF  # a tensor byte; the header still parses
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model\.safetensors does not match its digest"):
        saved.trainer_state()
    with pytest.raises(CheckpointError, match=r"model\.safetensors does not match its digest"):
        Policy.load(saved.path, device="cpu", log=lambda _: None)


@pytest.mark.parametrize(
    "content", [b"", b"PK\x03\x04truncated", os.urandom(4096)], ids=["empty", "truncated", "random"]
)
def test_an_unreadable_trainer_state_is_one_error_naming_the_file(saved, content):
    state_file = saved.path / ckpt.TRAINER_STATE
    whole = state_file.read_bytes()
    state_file.write_bytes(whole[: len(whole) // 2] if content.startswith(b"PK") else content)
    (saved.path / ckpt.DIGESTS).unlink()
    write_digests(saved.path)  # digests match: the loader itself must cope
    with pytest.raises(CheckpointError, match=r"cannot read .*trainer_state\.pt"):
        saved.trainer_state()


def test_a_digest_listing_cannot_point_outside_its_folder(saved, tmp_path):
    (tmp_path / "secret").write_text("x")
    (saved.path / ckpt.DIGESTS).write_text('{"../../secret": "0"}')
    with pytest.raises(CheckpointError, match="missing from the checkpoint"):
        saved.trainer_state()
