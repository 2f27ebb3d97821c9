"""LoRA adapters: what trains, what engines get, checkpoints, resume, export and bad settings."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlfactory_nb.config import ConfigError
from rlfactory_nb.config_sections import LoraConfig
from rlfactory_nb.models import lora
from rlfactory_nb.models.checkpoint import CheckpointError, load_latest
from rlfactory_nb.models.export import export
from rlfactory_nb.models.policy import Policy
from rlfactory_nb.models.precision import Precision
from rlfactory_nb.train.loop import Trainer
from rlfactory_nb.train.trainable import TrainingSetup, is_adapted
from rlfactory_nb.train.update import UpdateSettings, make_optimizer, policy_update

from .conftest import tiny_random_qwen3
from .test_loop import hand_batch

RANK4 = LoraConfig(rank=4, alpha=8.0)
FLOAT32 = Precision(torch.float32, torch.float32)


def adapted(settings: LoraConfig = RANK4) -> torch.nn.Module:
    return TrainingSetup(FLOAT32, lora=settings, base_name="tiny").prepare(tiny_random_qwen3())


def trained_adapter() -> torch.nn.Module:
    model = adapted()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    policy_update(model, optimizer, hand_batch(), UpdateSettings(mini_batch_size=4), step=1)
    return model


def logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits


IDS = torch.tensor([[5, 6, 7, 8, 9, 10]])


def test_only_the_adapters_train_and_hold_optimizer_state(make_cfg):
    model = adapted()
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_" in name for name in trainable)
    optimizer = make_optimizer(model, make_cfg())
    held = sum(p.numel() for group in optimizer.param_groups for p in group["params"])
    total = sum(p.numel() for p in model.parameters())
    assert held == sum(p.numel() for p in model.parameters() if p.requires_grad) and held < 0.2 * total
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    policy_update(model, optimizer, hand_batch(), UpdateSettings(mini_batch_size=4), step=1)
    for name, parameter in model.named_parameters():
        if ".lora_" not in name:
            assert torch.equal(parameter, before[name]), f"the frozen base moved: {name}"
    assert any(".lora_B" in name and not torch.equal(p, before[name]) for name, p in model.named_parameters())


def test_merged_weights_equal_peft_merge_and_the_adapted_model():
    model = trained_adapter()
    state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    merged = lora.merge_state(state, lora.scaling(RANK4))
    plain = tiny_random_qwen3()
    plain.load_state_dict(merged)
    assert torch.allclose(logits(plain, IDS), logits(model, IDS), atol=1e-5)
    peft_merged = model.merge_and_unload().state_dict()
    for name, tensor in merged.items():
        assert torch.allclose(tensor, peft_merged[name], atol=1e-6), name


def test_the_kl_reference_is_the_base_with_adapters_off_not_a_copy():
    model = trained_adapter()
    reference = TrainingSetup(FLOAT32, lora=RANK4).reference(model)
    assert list(reference.parameters()) == []  # no second copy of the weights
    assert torch.allclose(logits(reference, IDS), logits(tiny_random_qwen3(), IDS), atol=1e-6)
    assert not torch.allclose(logits(model, IDS), logits(tiny_random_qwen3(), IDS), atol=1e-4)


def test_a_target_module_the_model_lacks_is_named_with_the_ones_it_has():
    with pytest.raises(ConfigError, match=r"'qkv'.*its linear layers are down_proj, gate_proj, k_proj"):
        adapted(LoraConfig(rank=4, target_modules=["q_proj", "qkv"]))


def test_chosen_target_modules_only_are_adapted():
    model = adapted(LoraConfig(rank=2, target_modules=["q_proj", "v_proj"]))
    layers = {
        name.split(".lora_A")[0].rsplit(".", 1)[-1]
        for name, _ in model.named_parameters()
        if ".lora_A" in name
    }
    assert layers == {"q_proj", "v_proj"}


async def test_a_lora_run_checkpoints_its_adapter_resumes_loads_and_exports(make_cfg, tmp_path):
    cfg = make_cfg(
        model__lora={"rank": 4, "alpha": 8.0},
        grpo__lr=1e-2,
        grpo__filter_zero_variance=False,
        grpo__kl_coef=0.1,
        cluster__backend="local",
    )
    trainer = await Trainer(cfg).start()
    try:
        assert is_adapted(trainer.policy.model)
        row = await trainer.step_once()
        assert row["train/optimizer_steps"] == 1 and row["train/kl"] >= 0
        checkpoint = await trainer.save_checkpoint()
        trained = logits(trainer.policy.model.eval(), IDS)
    finally:
        await trainer.close()
    assert (checkpoint / "adapter_config.json").is_file() and not (checkpoint / "model.safetensors").exists()
    assert lora.adapter_base(checkpoint) == cfg.model.name

    # Policy.load (notebooks 01/04, rf.evaluate) merges the adapter over its base
    merged = Policy.load(checkpoint, device="cpu", log=lambda _: None)
    assert not is_adapted(merged.model) and merged.base_path is not None
    assert torch.allclose(logits(merged.model, IDS), trained, atol=1e-5)

    # export writes a folder plain transformers opens, with the trained behaviour
    folder = export(checkpoint, tmp_path / "exported", dtype="float32")
    assert not (folder / "adapter_config.json").exists()
    assert torch.allclose(logits(AutoModelForCausalLM.from_pretrained(folder), IDS), trained, atol=1e-5)

    # resume continues the adapters, step and optimizer
    resumed = await Trainer(cfg).start(resume=True)
    try:
        assert resumed.step == load_latest(cfg.run_dir).step == 1
        assert is_adapted(resumed.policy.model)
        assert torch.allclose(logits(resumed.policy.model.eval(), IDS), trained, atol=1e-6)
    finally:
        await resumed.close()


async def test_resuming_with_the_other_kind_of_checkpoint_is_refused_before_anything_starts(make_cfg):
    full = make_cfg(cluster__backend="local")
    trainer = await Trainer(full).start()
    try:
        trainer.step = 1
        await trainer.save_checkpoint()
    finally:
        await trainer.close()
    with pytest.raises(
        CheckpointError, match="holds full fine-tuning weights but the run config says model.lora is set"
    ):
        await Trainer(full.replace({"model.lora": {"rank": 4}})).start(resume=True)


def test_the_export_command_writes_a_folder_transformers_loads(tmp_path, tiny_dir):
    from rlfactory_nb.cli import main

    assert main(["export", str(tiny_dir), str(tmp_path / "out"), "--dtype", "bfloat16"]) == 0
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert next(model.parameters()).dtype == torch.bfloat16
    assert torch.allclose(logits(model.float(), IDS), logits(tiny_random_qwen3(), IDS), atol=0.1)
