"""The policy update of one step: `ppo_epochs` passes of mini-batched, clipped gradient steps.

For each pass the step's trajectories are shuffled (seeded by step and pass, so every rank agrees),
cut into mini-batches of `mini_batch_size`, and each mini-batch is one optimizer step whose gradient
is accumulated over micro-batches of `micro_batch_size`.

Accumulation weighs each micro-batch by its share of the mini-batch, so the accumulated gradient is
exactly the gradient of the mini-batch loss: its share of tokens for token-mean losses (`dapo`), of
sequences for the others (see `rlfactory_nb.algo.losses`). With several data-parallel ranks each rank
takes a contiguous slice of every mini-batch; DDP averages gradients over ranks, so a rank scales its
micro-batches by world_size to keep the sum right. Every rank runs the same number of micro-batches,
padding with zero-weight ones where its slice is shorter: the gradient reduction (DDP) and the
per-layer weight gathers (FSDP, see `rlfactory_nb.train.parallel`) need every rank to take part.

The old logprobs are the rollout engine's. With `truncate_ratio` set they are recomputed by the trainer
before the first pass, and the engine's enter as truncated importance weights (TIS).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field, fields
from typing import Any

import torch
from torch import Tensor

from rlfactory_nb.algo.losses import LossArgs, get_loss, kl_penalty, masked_entropy, masked_mean
from rlfactory_nb.train.batch import (
    TrainBatch,
    first_trained_position,
    micro_batches,
    window_logprobs,
)
from rlfactory_nb.train.parallel import gradient_sync

TOKEN_MEAN_LOSSES = frozenset({"dapo"})
"""losses averaged over all tokens of a batch; the rest average over sequences"""


@dataclass(frozen=True)
class UpdateSettings:
    """The knobs of `policy_update`, read from a run config by `from_config`."""

    loss: str = "grpo"
    loss_args: LossArgs = field(default_factory=LossArgs)
    ppo_epochs: int = 1
    mini_batch_size: int = 32
    micro_batch_size: int = 16
    max_grad_norm: float = 1.0
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    entropy_coef: float = 0.0
    seed: int = 0

    @classmethod
    def from_config(cls, cfg: Any) -> UpdateSettings:
        """From a RunConfig; dr_grpo's token budget defaults to the rollout's generation budget."""
        grpo = cfg.grpo
        budget = grpo.token_budget or cfg.rollout.max_new_tokens * cfg.rollout.max_turns
        return cls(
            loss=grpo.loss,
            loss_args=LossArgs.from_config(grpo, token_budget=budget),
            **{f.name: getattr(grpo, f.name) for f in fields(cls) if f.name not in ("loss", "loss_args")},
        )


def make_optimizer(model: torch.nn.Module, cfg: Any) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=cfg.grpo.lr, weight_decay=cfg.grpo.weight_decay)


def policy_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: TrainBatch,
    settings: UpdateSettings,
    step: int,
    reference: torch.nn.Module | None = None,
    rank: int = 0,
    world_size: int = 1,
) -> dict[str, float]:
    """Run the update (module docstring) and return `train/...` metrics averaged over micro-batches."""
    get_loss(settings.loss)  # an unknown loss name fails before any work
    if settings.mini_batch_size < world_size:
        raise ValueError(
            f"grpo.mini_batch_size ({settings.mini_batch_size}) must be >= the number of policy workers "
            f"({world_size}) so that every worker trains on each mini-batch"
        )
    rollout_logprobs = None
    if settings.loss_args.truncate_ratio is not None:
        rollout_logprobs = batch.old_logprobs
        batch = _with(batch, old_logprobs=recompute_logprobs(model, batch, settings.micro_batch_size))
    tally = _Tally()
    for epoch in range(settings.ppo_epochs):
        shuffle = torch.Generator().manual_seed(settings.seed * 1_000_003 + step * 1_009 + epoch)
        order = torch.randperm(batch.batch_size, generator=shuffle)  # the same on every rank
        for start in range(0, batch.batch_size, settings.mini_batch_size):
            rows = order[start : start + settings.mini_batch_size]
            mini = take(batch, rows)
            mini_rollout = rollout_logprobs[rows] if rollout_logprobs is not None else None
            _mini_batch_step(
                model, optimizer, mini, mini_rollout, settings, reference, rank, world_size, tally
            )
    metrics = tally.means()
    metrics["train/lr"] = optimizer.param_groups[0]["lr"]
    return metrics


def _mini_batch_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    mini: TrainBatch,
    rollout_logprobs: Tensor | None,
    settings: UpdateSettings,
    reference: torch.nn.Module | None,
    rank: int,
    world_size: int,
    tally: _Tally,
) -> None:
    """One optimizer step on one mini-batch: accumulate over this rank's micro-batches, clip, step."""
    total = loss_weight(mini, settings.loss)
    mine = torch.tensor_split(torch.arange(mini.batch_size), world_size)[rank]  # this rank's rows
    shard = take(mini, mine if mine.numel() else torch.tensor([0]))
    shard_rollout = None
    if rollout_logprobs is not None:  # a rank with no rows of its own trains a zero-weight row
        shard_rollout = rollout_logprobs[mine] if mine.numel() else torch.zeros_like(shard.old_logprobs)
    parts = _micro_slices(shard, settings.micro_batch_size) if mine.numel() else []
    longest_slice = math.ceil(mini.batch_size / world_size)
    padding = math.ceil(longest_slice / settings.micro_batch_size) - len(parts)
    # (rows, scale): world_size offsets the mean over ranks; padding rows take part at weight 0
    work = [(rows, float(world_size)) for rows in parts] + [(torch.tensor([0]), 0.0)] * padding
    optimizer.zero_grad(set_to_none=True)
    for index, (rows, scale) in enumerate(work):
        micro = take(shard, rows)
        micro_rollout = (
            shard_rollout[rows][:, : micro.input_ids.shape[1]] if shard_rollout is not None else None
        )
        with gradient_sync(model, enabled=index == len(work) - 1):
            share = loss_weight(micro, settings.loss) / max(total, 1.0)
            loss, metrics = micro_loss(model, micro, micro_rollout, settings, reference)
            (loss * share * scale).backward()
        tally.add(metrics, share * scale)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), settings.max_grad_norm)
    if hasattr(grad_norm, "full_tensor"):  # a DTensor under FSDP
        grad_norm = grad_norm.full_tensor()
    optimizer.step()
    tally.add_step(float(grad_norm))


def micro_loss(
    model: torch.nn.Module,
    micro: TrainBatch,
    rollout_logprobs: Tensor | None,
    settings: UpdateSettings,
    reference: torch.nn.Module | None,
) -> tuple[Tensor, dict[str, float]]:
    """Policy loss (+ KL to the reference, - entropy bonus) of one micro-batch, and its metrics."""
    micro = micro.to(_device(model))
    if rollout_logprobs is not None:
        rollout_logprobs = rollout_logprobs.to(micro.input_ids.device)
    mask = micro.loss_mask
    start = first_trained_position(mask)
    window = response_logits(model, micro, start)  # (b, L - start + 1, V)
    logprobs = window_logprobs(window, micro.input_ids, start)  # (b, L)
    loss, metrics = get_loss(settings.loss)(
        logprobs, micro.old_logprobs, micro.advantages, mask, settings.loss_args, rollout_logprobs
    )
    # window[:, j] predicts token start + j: pair it with the mask from `start`, no (b, L, V) copy.
    with contextlib.nullcontext() if settings.entropy_coef else torch.no_grad():
        entropy = masked_entropy(window[:, :-1], mask[:, start:])
    metrics["entropy"] = float(entropy.detach())
    if settings.entropy_coef:
        loss = loss - settings.entropy_coef * entropy
    if reference is not None and settings.kl_coef:
        with torch.no_grad():
            reference_logprobs = window_logprobs(
                response_logits(reference, micro, start), micro.input_ids, start
            )
        kl = masked_mean(kl_penalty(logprobs, reference_logprobs, mask, settings.kl_estimator), mask)
        loss = loss + settings.kl_coef * kl
        metrics["kl"] = float(kl.detach())
    return loss, metrics


def response_logits(model: torch.nn.Module, micro: TrainBatch, start: int) -> Tensor:
    """Logits of positions start-1 .. L-1 only: the prompt's positions before them are never
    trained, and their (b, start, V) logits were most of the forward's output memory and time."""
    keep = micro.input_ids.shape[1] - start + 1
    return model(input_ids=micro.input_ids, attention_mask=micro.attention_mask, logits_to_keep=keep).logits


@torch.no_grad()
def recompute_logprobs(model: torch.nn.Module, batch: TrainBatch, micro_batch_size: int) -> Tensor:
    """The trainer's own logprob of every sampled token (B, L), 0 elsewhere, before any update."""
    result = torch.zeros_like(batch.old_logprobs)
    for row, micro in zip(
        range(0, batch.batch_size, micro_batch_size), micro_batches(batch, micro_batch_size)
    ):
        on_device = micro.to(_device(model))
        first = first_trained_position(on_device.loss_mask)
        logprobs = window_logprobs(response_logits(model, on_device, first), on_device.input_ids, first).cpu()
        width = logprobs.shape[1]
        result[row : row + micro.batch_size, :width] = logprobs.masked_fill(~micro.loss_mask, 0.0)
    return result


def loss_weight(batch: TrainBatch, loss: str) -> float:
    """What a batch's loss is a mean over: sampled tokens for token-mean losses, else sequences with
    at least one sampled token."""
    if loss in TOKEN_MEAN_LOSSES:
        return float(batch.loss_mask.sum())
    return float(batch.loss_mask.any(dim=-1).sum())


def take(batch: TrainBatch, rows: Tensor) -> TrainBatch:
    """The trajectories at `rows` (a 1-D index tensor), trimmed of all-padding columns."""
    return TrainBatch(**{f.name: getattr(batch, f.name)[rows] for f in fields(batch)}).trim()


def _with(batch: TrainBatch, **changes: Tensor) -> TrainBatch:
    return TrainBatch(**{f.name: changes.get(f.name, getattr(batch, f.name)) for f in fields(batch)})


def _micro_slices(batch: TrainBatch, size: int) -> list[Tensor]:
    return [
        torch.arange(start, min(start + size, batch.batch_size)) for start in range(0, batch.batch_size, size)
    ]


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


class _Tally:
    """Weighted means of per-micro-batch metrics, plus grad norms per optimizer step."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.weight = 0.0
        self.grad_norms: list[float] = []
        self.tokens = 0.0

    def add(self, metrics: dict[str, float], weight: float) -> None:
        if weight:  # a zero-weight padding micro-batch trained no tokens
            self.tokens += metrics.get("num_tokens", 0.0)
        for key, value in metrics.items():
            if key not in ("num_tokens", "num_sequences"):
                self.sums[key] = self.sums.get(key, 0.0) + value * weight
        self.weight += weight

    def add_step(self, grad_norm: float) -> None:
        self.grad_norms.append(grad_norm)

    def means(self) -> dict[str, float]:
        weight = self.weight or 1.0
        metrics = {f"train/{key}": value / weight for key, value in self.sums.items()}
        metrics["train/grad_norm"] = sum(self.grad_norms) / max(len(self.grad_norms), 1)
        metrics["train/optimizer_steps"] = len(self.grad_norms)
        metrics["train/tokens"] = self.tokens
        return metrics
