"""The training loop on a random tiny Qwen3 with scripted rewards: direction of the update, filtering,
masking, gradient accumulation, metrics, the CLI; and one slow run on the real tiny-calculator preset."""

import json
import threading
from pathlib import Path

import pytest
import torch

from rlfactory_nb.algo.registry import LossArgs
from rlfactory_nb.cli.train import main as train_cli
from rlfactory_nb.models.policy import Policy
from rlfactory_nb.train.batch import TrainBatch, build_batch, token_logprobs
from rlfactory_nb.train.loop import Trainer, train
from rlfactory_nb.train.metrics import STEP_KEYS, read_metrics
from rlfactory_nb.train.update import UpdateSettings, micro_loss, policy_update
from rlfactory_nb.types import Trajectory, load_jsonl

from .conftest import tiny_random_qwen3

ROOT = Path(__file__).resolve().parents[2]


@torch.no_grad()
def sequence_logprob(model, traj: Trajectory) -> float:
    batch = build_batch([traj], [0.0], pad_id=0)
    logprobs = token_logprobs(model(input_ids=batch.input_ids).logits, batch.input_ids)
    return float(logprobs[batch.loss_mask].sum())


async def run_one_step(cfg):
    trainer = await Trainer(cfg).start()
    try:
        row = await trainer.step_once()
        return trainer, row
    finally:
        await trainer.close()


async def test_a_step_raises_the_logprob_of_high_advantage_trajectories(make_cfg):
    trainer, row = await run_one_step(make_cfg(grpo__steps=1))
    assert row["groups/trained"] > 0 and row["train/optimizer_steps"] == 1
    trajectories = load_jsonl(trainer.run_dir / "trajectories" / "step_000001.jsonl")
    model = trainer.policy.model
    changes = {}
    for traj in trajectories:
        before = sum(traj.logprobs)  # the engine's logprobs: the model before the update
        changes[traj.id] = sequence_logprob(model, traj) - before
        assert before == pytest.approx(sequence_logprob(tiny_random_qwen3(), traj), abs=1e-4)
    for group in {t.metadata["prompt_index"] for t in trajectories}:
        members = [t for t in trajectories if t.metadata["prompt_index"] == group]
        best = max(members, key=lambda t: t.metadata["reward"])
        worst = min(members, key=lambda t: t.metadata["reward"])
        if best.metadata["reward"] > worst.metadata["reward"]:
            assert changes[best.id] > 0 > changes[worst.id]


async def test_zero_variance_groups_are_dropped_and_counted(make_cfg):
    _, row = await run_one_step(make_cfg("constant_for_first_prompt"))
    assert row["groups/total"] == 3
    assert row["groups/zero_variance"] >= 1
    assert row["groups/trained"] == 3 - row["groups/zero_variance"]
    assert row["train/tokens"] == pytest.approx(
        row["rollout/response_tokens_mean"] * 4 * row["groups/trained"], rel=0.5
    )


async def test_all_flat_groups_leave_the_weights_unchanged(make_cfg):
    start = {k: v.clone() for k, v in tiny_random_qwen3().state_dict().items()}
    trainer, row = await run_one_step(make_cfg("constant"))
    assert row["groups/zero_variance"] == 3 and row["groups/trained"] == 0
    assert "train/loss" not in row
    for name, tensor in trainer.policy.model.state_dict().items():
        assert torch.equal(tensor, start[name]), name


async def test_filtering_off_keeps_flat_groups(make_cfg):
    _, row = await run_one_step(make_cfg("constant", grpo__filter_zero_variance=False))
    assert row["groups/trained"] == 3 and row["train/optimizer_steps"] == 1


async def test_per_turn_rewards_train_through_token_advantages(make_cfg):
    _, row = await run_one_step(make_cfg("per_turn"))
    assert row["train/optimizer_steps"] == 1 and row["advantages/abs_mean"] > 0


async def test_kl_to_a_frozen_reference_only_when_kl_coef_is_set(make_cfg):
    trainer, row = await run_one_step(make_cfg(grpo__kl_coef=0.1))
    assert row["train/kl"] == pytest.approx(0.0, abs=1e-6)  # one optimizer step: measured before it
    reference, trained = trainer.backend.reference.state_dict(), trainer.policy.model.state_dict()
    assert any(not torch.equal(reference[name], trained[name]) for name in trained)
    assert not any(p.requires_grad for p in trainer.backend.reference.parameters())
    trainer, row = await run_one_step(make_cfg(grpo__kl_coef=0.0, name="no-kl"))
    assert trainer.backend.reference is None and "train/kl" not in row


def hand_batch(seed: int = 0) -> TrainBatch:
    """Four trajectories with tool (masked) tokens in the middle of the response."""
    generator = torch.Generator().manual_seed(seed)
    trajectories = []
    for row in range(4):
        response = torch.randint(0, 200, (7 + row,), generator=generator).tolist()
        mask = [1, 1, 0, 0, 1] + [1] * (2 + row)
        trajectories.append(
            Trajectory(
                prompt_ids=[5, 6, 7][: 1 + row % 3],
                response_ids=response,
                loss_mask=mask,
                logprobs=[-3.0] * sum(mask),
            )
        )
    return build_batch(trajectories, [1.0, -0.5, 0.25, -0.75], pad_id=0)


def gradients(model, batch: TrainBatch, settings: UpdateSettings) -> dict[str, torch.Tensor]:
    model.zero_grad()
    loss, _, _ = micro_loss(model, batch, None, settings, None)
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def test_masked_positions_get_no_gradient():
    model = tiny_random_qwen3()
    batch = hand_batch()
    settings = UpdateSettings(loss="dapo", entropy_coef=0.01)
    reference = gradients(model, batch, settings)
    # garbage in every masked position: old logprobs NaN, per-token advantages huge
    masked = ~batch.loss_mask
    poisoned = TrainBatch(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        loss_mask=batch.loss_mask,
        old_logprobs=batch.old_logprobs.masked_fill(masked, float("nan")),
        advantages=batch.advantages[:, None].expand_as(batch.input_ids).masked_fill(masked, 1e6).contiguous(),
    )
    for name, grad in gradients(model, poisoned, settings).items():
        assert torch.allclose(grad, reference[name], atol=1e-6), name


@pytest.mark.parametrize("loss", ["grpo", "dapo", "dr_grpo"])
def test_micro_batch_accumulation_equals_one_full_batch(loss):
    """Same optimizer step whether the mini-batch runs as one micro-batch or as micro-batches of 1."""
    batch = hand_batch()
    results = []
    for micro in (4, 1):
        model = tiny_random_qwen3()
        settings = UpdateSettings(
            loss=loss,
            loss_args=LossArgs(token_budget=16),
            mini_batch_size=4,
            micro_batch_size=micro,
            max_grad_norm=1e9,
        )
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        metrics = policy_update(model, optimizer, batch, settings, step=1)
        results.append((model.state_dict(), metrics))
    (full, full_metrics), (accumulated, accumulated_metrics) = results
    for name, tensor in full.items():
        assert torch.allclose(tensor, accumulated[name], atol=1e-6), name
    assert full_metrics["train/loss"] == pytest.approx(accumulated_metrics["train/loss"], abs=1e-6)
    assert full_metrics["train/grad_norm"] == pytest.approx(accumulated_metrics["train/grad_norm"], rel=1e-5)


def test_ppo_epochs_and_mini_batches_count_optimizer_steps():
    model = tiny_random_qwen3()
    settings = UpdateSettings(loss="grpo", ppo_epochs=2, mini_batch_size=2, micro_batch_size=1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    metrics = policy_update(model, optimizer, hand_batch(), settings, step=1)
    assert metrics["train/optimizer_steps"] == 4  # 2 epochs x (4 trajectories / 2 per mini-batch)
    assert metrics["train/clip_fraction"] >= 0 and metrics["train/grad_norm"] > 0


def test_truncated_importance_sampling_recomputes_old_logprobs():
    model = tiny_random_qwen3()
    settings = UpdateSettings(
        loss="grpo", loss_args=LossArgs(truncate_ratio=2.0), mini_batch_size=4, micro_batch_size=2
    )
    metrics = policy_update(
        model, torch.optim.SGD(model.parameters(), lr=0.0), hand_batch(), settings, step=1
    )
    # rollout logprobs of -3 vs the trainer's own: the TIS weights are active and capped at 2
    assert 0 < metrics["train/tis_weight_mean"] <= 2.0
    # old logprobs are the trainer's own, so before any step every ratio is exactly 1
    assert metrics["train/ratio_mean"] == pytest.approx(1.0, abs=1e-5)


async def test_metrics_rows_trajectories_and_callbacks(make_cfg):
    seen = []
    cfg = make_cfg(grpo__steps=2, grpo__eval_every=2, data__eval_size=3)
    result = await train(cfg, on_step=lambda row: seen.append(row["step"]))
    rows = read_metrics(cfg.run_dir)
    assert [row["step"] for row in rows] == [0, 1, 2]  # step 0: the baseline eval
    for row in rows[1:]:
        assert set(STEP_KEYS) <= set(row), set(STEP_KEYS) - set(row)
    assert {"eval/sampled_reward/mean", "eval/greedy_reward/mean"} <= set(rows[0]) & set(rows[2])
    assert seen == [1, 2] and result.step == 2
    assert result.checkpoint is not None and result.checkpoint.name == "step_000002"
    saved = load_jsonl(cfg.run_dir / "trajectories" / "step_000002.jsonl")
    assert len(saved) == 12 and all("reward" in traj.metadata for traj in saved)


async def test_a_stop_event_ends_the_run_after_the_current_step(make_cfg):
    stop = threading.Event()
    result = await train(make_cfg(grpo__steps=5), on_step=lambda row: stop.set(), stop_event=stop)
    assert result.step == 1 and [row["step"] for row in read_metrics(result.run_dir)] == [1]


async def test_a_second_run_in_the_same_folder_needs_resume(make_cfg):
    cfg = make_cfg(grpo__steps=1)
    await train(cfg)
    with pytest.raises(FileExistsError, match="--resume"):
        await train(cfg)


def test_cli_runs_a_config_file_with_overrides(make_cfg, tmp_path, capsys):
    path = tmp_path / "config.yaml"
    make_cfg().to_yaml(path)
    assert train_cli(["train", str(path), "grpo.steps=1", "name=from-cli"]) == 0
    assert "finished step 1 of 1" in capsys.readouterr().out
    assert len(read_metrics(tmp_path / "runs" / "from-cli")) == 1


@pytest.mark.slow
async def test_three_steps_on_tiny_calculator_with_tools(tiny_policy, tmp_path):
    from rlfactory_nb.config import RunConfig

    cfg = RunConfig.from_yaml(
        ROOT / "examples/calculator/config.yaml",
        overrides={
            "output_dir": str(tmp_path),
            "tools.config": str(ROOT / "examples/calculator/tools.yaml"),
            "grpo.steps": 3,
            "grpo.prompts_per_step": 8,
            "grpo.eval_every": 3,
            "data.eval_size": 8,
        },
    )
    result = await train(cfg)
    rows = read_metrics(cfg.run_dir)
    assert [row["step"] for row in rows] == [0, 1, 2, 3]
    assert result.checkpoint is not None
    policy = Policy.load(result.checkpoint)
    assert policy.num_parameters == tiny_policy.num_parameters
    assert json.loads((result.checkpoint / "config.json").read_text())["model_type"] == "qwen3"


@pytest.mark.parametrize("shown", [3, 0])
async def test_a_step_shows_samples_per_step_trajectories_in_tensorboard(make_cfg, shown):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = make_cfg(samples_per_step=shown)
    await run_one_step(cfg)
    events = EventAccumulator(str(cfg.run_dir / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    texts = events.Tensors("samples/text_summary") if "samples/text_summary" in events.Tags()["tensors"] else []
    assert len(texts) == (1 if shown else 0)
    if shown:
        table = texts[0].tensor_proto.string_val[0].decode().splitlines()
        assert texts[0].step == 1 and len(table) == 2 + shown  # header, rule, one line per trajectory
        assert all(line.startswith("| 1 | ") for line in table[2:])
