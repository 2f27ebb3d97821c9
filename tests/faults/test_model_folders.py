"""Model folders are data people download: loading one runs none of its Python unless
`model.trust_remote_code` says so, a checkpoint serves only the files its digests list, and a chain of
adapter bases is bounded (issue #32, items 5 and 6)."""

import json
import shutil

import pytest
import torch
from tiny_models import random_qwen3

from rlfactory_nb.config import RunConfig
from rlfactory_nb.models.checkpoint import CheckpointError, save_checkpoint, verify_digests
from rlfactory_nb.models.policy import MAX_ADAPTER_DEPTH, Policy, RemoteCodeError

CUSTOM_CODE = """
from pathlib import Path
Path({marker!r}).touch()  # what a hostile folder's code would do instead, as the user
from transformers import Qwen3Config, Qwen3ForCausalLM
class EvilConfig(Qwen3Config):
    model_type = "evil_qwen3"
class EvilModel(Qwen3ForCausalLM):
    config_class = EvilConfig
"""


@pytest.fixture
def custom_code_folder(tiny_dir, tmp_path):
    """The tiny model, with a config.json whose auto_map names evil.py in the folder."""
    folder = shutil.copytree(tiny_dir, tmp_path / "custom-code-model")
    marker = tmp_path / "pwned"
    (folder / "evil.py").write_text(CUSTOM_CODE.format(marker=str(marker)))
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="evil_qwen3", auto_map={"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"})
    (folder / "config.json").write_text(json.dumps(config))
    return folder, marker


def test_a_model_folder_with_its_own_code_runs_none_of_it_unless_the_config_says_so(custom_code_folder, monkeypatch):
    folder, marker = custom_code_folder
    monkeypatch.setattr("builtins.input", lambda *_: "y")  # someone answers transformers' prompt
    with pytest.raises(RemoteCodeError, match=r"model\.trust_remote_code"):
        Policy.load(folder, device="cpu", log=lambda _: None)
    assert not marker.exists(), "loading the folder ran its Python"
    assert RunConfig(name="x").model.trust_remote_code is False
    Policy.load(folder, device="cpu", log=lambda _: None, trust_remote_code=True)
    assert marker.exists()  # asked for explicitly: the folder's code runs


@pytest.fixture
def saved(make_cfg, tokenizer):
    return save_checkpoint(make_cfg().run_dir, 1, random_qwen3(), tokenizer, {"state": {}, "param_groups": []})


def test_files_a_checkpoint_does_not_list_are_refused(saved, tiny_dir):
    (saved.path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tiny_dir), "peft_type": "LORA"}))
    (saved.path / "adapter_model.safetensors").write_bytes(b"other weights")
    for load in (lambda: verify_digests(saved.path), saved.trainer_state, lambda: Policy.load(saved.path, device="cpu", log=lambda _: None)):
        with pytest.raises(CheckpointError, match=r"'adapter_config\.json', 'adapter_model\.safetensors'.* does not list"):
            load()


def test_an_adapter_chain_of_bases_is_bounded(tmp_path):
    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(folder), "peft_type": "LORA"}))
    torch.save({}, folder / "adapter_model.bin")  # a weight file, so that the folder counts as a model
    with pytest.raises(CheckpointError, match=f"longer than {MAX_ADAPTER_DEPTH} or a loop"):
        Policy.load(folder, device="cpu", log=lambda _: None)
