"""Mixed precision that learns: bfloat16 compute over float32 master weights and AdamW state.

The failure these guard against is silent: AdamW on bfloat16 weights at lr 1e-6 rounds almost every
step away, while losses, rewards and gradient norms look normal. CPU runs bfloat16 like a GPU does.
"""

import warnings

import pytest
import torch

from rlfactory_nb.config import ConfigError
from rlfactory_nb.config_sections import ModelConfig
from rlfactory_nb.models.precision import Precision
from rlfactory_nb.train.loop import Trainer
from rlfactory_nb.train.trainable import TrainingSetup
from rlfactory_nb.train.update import UpdateSettings, make_optimizer, policy_update

from .conftest import tiny_random_qwen3
from .test_loop import hand_batch

BF16_COMPUTE = Precision(compute=torch.bfloat16, master=torch.float32)
LR = 1e-6


def one_step(precision: Precision) -> tuple[dict, dict]:
    """(weights before, weights after) one AdamW step at lr 1e-6, as the trained model holds them."""
    model = TrainingSetup(precision).prepare(tiny_random_qwen3())
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    settings = UpdateSettings(loss="grpo", mini_batch_size=4, micro_batch_size=2, precision=precision)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LR)
    policy_update(model, optimizer, hand_batch(), settings, step=1)
    return before, {name: p.detach().clone() for name, p in model.named_parameters()}


def changed_fraction(before: dict, after: dict) -> float:
    changed = sum(int((after[n].float() != before[n].float()).sum()) for n in before)
    return changed / sum(t.numel() for t in before.values())


def deltas(before: dict, after: dict) -> torch.Tensor:
    return torch.cat([(after[n].float() - before[n].float()).flatten() for n in before])


def test_bfloat16_compute_with_a_float32_master_changes_the_weights_like_float32():
    before, after = one_step(BF16_COMPUTE)
    assert all(t.dtype == torch.float32 for t in after.values())  # the master and what AdamW steps
    assert changed_fraction(before, after) > 0.5
    reference_before, reference_after = one_step(Precision(torch.float32, torch.float32))
    mixed, reference = deltas(before, after), deltas(reference_before, reference_after)
    # AdamW's first step moves each weight by about lr * sign(gradient): compare each weight's move
    close = (mixed - reference).abs() <= 0.1 * LR
    assert close.float().mean() > 0.95


def test_a_bfloat16_master_is_the_failure_this_prevents():
    with pytest.warns(UserWarning, match="round away"):
        precision = Precision.from_config(
            ModelConfig(dtype="bfloat16", master_dtype="bfloat16"), torch.device("cpu")
        )
    before, after = one_step(precision)
    assert changed_fraction(before, after) < 0.05  # what the issue measured: 0.3%


def test_float16_compute_is_refused_with_what_to_use_instead():
    with pytest.raises(ConfigError, match="loss scaling.*bfloat16"):
        Precision.from_config(ModelConfig(dtype="float16"), torch.device("cpu"))


def test_auto_means_float32_on_cpu_and_bfloat16_over_a_float32_master_on_gpu():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Precision.from_config(ModelConfig(), torch.device("cpu")) == Precision(
            torch.float32, torch.float32
        )
        assert Precision.from_config(ModelConfig(), torch.device("cuda")) == BF16_COMPUTE


async def test_engines_get_the_compute_dtype_and_the_gap_is_reported(make_cfg):
    cfg = make_cfg(
        model__dtype="bfloat16", grpo__lr=LR, grpo__filter_zero_variance=False, cluster__backend="local"
    )
    trainer = await Trainer(cfg).start()
    try:
        assert next(trainer.policy.model.parameters()).dtype == torch.float32
        assert trainer.backend.engine.compute_dtype == torch.bfloat16
        before = {k: v.clone() for k, v in trainer.policy.model.state_dict().items()}
        row = await trainer.step_once()
        assert row["train/optimizer_steps"] == 1
        assert 0 <= row["train/logprob_gap_mean"] <= row["train/logprob_gap_max"]
        assert changed_fraction(before, trainer.policy.model.state_dict()) > 0.5
    finally:
        await trainer.close()


async def test_resume_from_a_mixed_precision_checkpoint_continues_bit_for_bit(make_cfg):
    cfg = make_cfg(model__dtype="bfloat16", grpo__lr=1e-3, cluster__backend="local")
    trainer = await Trainer(cfg).start()
    try:
        await trainer.backend.update(hand_batch(0), step=1)
        trainer.step = 1
        await trainer.save_checkpoint()
        await trainer.backend.update(hand_batch(1), step=2)
        uninterrupted = {k: v.clone() for k, v in trainer.policy.model.state_dict().items()}
    finally:
        await trainer.close()
    resumed = await Trainer(cfg).start(resume=True)
    try:
        assert resumed.step == 1
        await resumed.backend.update(hand_batch(1), step=2)
        for name, tensor in resumed.policy.model.state_dict().items():
            assert tensor.dtype == torch.float32 and torch.equal(tensor, uninterrupted[name]), name
    finally:
        await resumed.close()


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
async def test_two_gloo_ranks_in_bfloat16_compute_learn_at_lr_1e6(shared_ray, make_cfg, strategy):
    """Slow: on the module's Ray, two gloo-ranked policy workers, and the run is compared with one
    process."""
    cfg = make_cfg(
        model__dtype="bfloat16",
        grpo__lr=LR,
        grpo__mini_batch_size=4,
        grpo__micro_batch_size=2,
        cluster__strategy=strategy,
        cluster__num_workers=2,
        cluster__num_engines=1,
        cluster__cpus_per_worker=0.5,
        cluster__object_store_memory_gb=0.3,
    )
    trainer = await Trainer(cfg).start()
    try:
        before = (await trainer.backend.worker_states())[0]
        optimizer_state = await trainer.backend.optimizer_state()
        await trainer.backend.update(hand_batch(), step=1)
        after = (await trainer.backend.worker_states())[0]
    finally:
        await trainer.close()
    assert all(t.dtype == torch.float32 for t in after.values())
    assert changed_fraction(before, after) > 0.5
    local = TrainingSetup.from_config(cfg, torch.device("cpu")).prepare(tiny_random_qwen3())
    local.load_state_dict(before)
    optimizer = make_optimizer(local, cfg)
    optimizer.load_state_dict(optimizer_state)
    policy_update(local, optimizer, hand_batch(), UpdateSettings.from_config(cfg), step=1)
    close = (deltas(before, after) - deltas(before, local.state_dict())).abs() <= 0.1 * LR
    assert close.float().mean() > 0.95
