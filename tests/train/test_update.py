"""The update's memory options keep its result: token-budget micro-batches, activation checkpointing,
and losses that declare their own reduction (including one named as module:function)."""

import pytest
import torch

from rlfactory_nb.algo.losses import masked_mean
from rlfactory_nb.algo.registry import LossArgs, get_loss, register_loss
from rlfactory_nb.models.precision import Precision
from rlfactory_nb.train import update
from rlfactory_nb.train.trainable import TrainingSetup
from rlfactory_nb.train.update import UpdateSettings, policy_update, token_budget_slices

from .conftest import tiny_random_qwen3
from .test_loop import hand_batch


@register_loss("test_token_mean", reduction="token")
def token_mean_loss(logprobs, old_logprobs, advantages, mask, args=None, rollout_logprobs=None):
    """A plain token-mean policy gradient, registered outside the package."""
    advantages = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    loss = masked_mean(-(logprobs - old_logprobs.detach()).exp() * advantages, mask)
    return loss, {"loss": loss.item(), "num_tokens": float(mask.sum()), "num_sequences": float(mask.shape[0])}


def unregistered_loss(*args, **kwargs):
    raise AssertionError("never called")


def sgd_result(settings: UpdateSettings, gradient_checkpointing: bool = False):
    model = TrainingSetup(
        Precision(torch.float32, torch.float32), gradient_checkpointing=gradient_checkpointing
    ).prepare(tiny_random_qwen3())
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    metrics = policy_update(model, optimizer, hand_batch(), settings, step=1)
    return model.state_dict(), metrics


def assert_same_update(a, b, atol=1e-6):
    (weights_a, metrics_a), (weights_b, metrics_b) = a, b
    for name, tensor in weights_a.items():
        assert torch.allclose(tensor, weights_b[name], atol=atol), name
    assert metrics_a["train/loss"] == pytest.approx(metrics_b["train/loss"], abs=1e-6)


@pytest.mark.parametrize("loss", ["grpo", "dapo", f"{__name__}:token_mean_loss"])
@pytest.mark.parametrize("budget", [8, 20, 10_000])
def test_token_budget_micro_batches_give_the_full_batch_update(loss, budget):
    common = {
        "loss": loss,
        "loss_args": LossArgs(token_budget=16),
        "mini_batch_size": 4,
        "max_grad_norm": 1e9,
    }
    full = sgd_result(UpdateSettings(micro_batch_size=4, **common))
    packed = sgd_result(UpdateSettings(micro_batch_size=4, max_tokens_per_micro_batch=budget, **common))
    assert_same_update(full, packed)


def test_token_budget_packs_longest_first_and_never_splits_a_row():
    lengths = torch.tensor([5, 40, 12, 11, 6, 3])
    slices = token_budget_slices(lengths, budget=24)
    assert sorted(torch.cat(slices).tolist()) == list(range(6))  # every row exactly once
    assert [s.tolist() for s in slices] == [[1], [2, 3], [4, 0, 5]]
    for rows in slices[1:]:
        assert int(lengths[rows].max()) * len(rows) <= 24  # only a lone row may exceed the budget


def test_every_rank_runs_the_same_number_of_micro_batches(monkeypatch):
    calls = []
    real = update.micro_loss

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(update, "micro_loss", counting)
    settings = UpdateSettings(mini_batch_size=4, micro_batch_size=4, max_tokens_per_micro_batch=12)
    counts = []
    for rank in (0, 1):  # one process per rank would run these concurrently; the count is what matters
        calls.clear()
        model = tiny_random_qwen3()
        policy_update(
            model, torch.optim.SGD(model.parameters(), lr=0.0), hand_batch(), settings, 1, None, rank, 2
        )
        counts.append(len(calls))
    assert counts[0] == counts[1] > 1


def test_activation_checkpointing_gives_the_same_loss_and_gradients_and_recomputes(monkeypatch):
    settings = UpdateSettings(loss="grpo", mini_batch_size=4, micro_batch_size=2, max_grad_norm=1e9)
    plain = sgd_result(settings)
    forwards = []
    layer_forward = type(tiny_random_qwen3().model.layers[0]).forward

    def counted(self, *args, **kwargs):
        forwards.append(1)
        return layer_forward(self, *args, **kwargs)

    monkeypatch.setattr(type(tiny_random_qwen3().model.layers[0]), "forward", counted)
    checkpointed = sgd_result(settings, gradient_checkpointing=True)
    assert_same_update(plain, checkpointed, atol=1e-6)
    assert len(forwards) == 2 * 2 * 2  # 2 micro-batches x 2 layers, each run again in backward


def test_a_loss_declares_its_reduction_and_an_undeclared_one_is_refused():
    assert update.loss_weight(hand_batch(), f"{__name__}:token_mean_loss") == float(
        hand_batch().loss_mask.sum()
    )
    assert get_loss(f"{__name__}:token_mean_loss") is token_mean_loss
    with pytest.raises(KeyError, match="not registered: decorate it with @register_loss"):
        get_loss(f"{__name__}:unregistered_loss")
    with pytest.raises(ImportError, match="grpo.loss: policy loss .no_such_module_here:loss.: cannot import"):
        get_loss("no_such_module_here:loss")
    with pytest.raises(ValueError, match="'sequence' or 'token'"):
        register_loss("bad", reduction="batch")
