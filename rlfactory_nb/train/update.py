"""The policy update of one step: `ppo_epochs` passes of mini-batched, clipped gradient steps.

For each pass the step's trajectories are shuffled (seeded by step and pass, so every rank agrees),
cut into mini-batches of `mini_batch_size`, and each mini-batch is one optimizer step whose gradient
is accumulated over micro-batches of `micro_batch_size`. All of them use the step's learning rate,
set first from `grpo.lr_schedule` (`rlfactory_nb.train.schedule`).

Accumulation weighs each micro-batch by its share of the mini-batch, so the accumulated gradient is
exactly the gradient of the mini-batch loss: its share of tokens for token-mean losses (`dapo`), of
sequences for the others (see `rlfactory_nb.algo.losses`). With several data-parallel ranks each rank
takes a contiguous slice of every mini-batch; DDP averages gradients over ranks, so a rank scales its
micro-batches by world_size to keep the sum right. Every rank runs the same number of micro-batches,
padding with zero-weight ones where its slice is shorter: the gradient reduction (DDP) and the
per-layer weight gathers (FSDP, see `rlfactory_nb.train.parallel`) need every rank to take part.

With `max_tokens_per_micro_batch` set, micro-batches are bounded by padded tokens instead of rows:
each rank's rows are sorted by length and packed, never split, so that rows x longest row stays
within the budget (`token_budget_slices`); the weights above keep the accumulated gradient exact.

With `padding_free` each micro-batch is one packed row instead (`rlfactory_nb.train.packing`): a
rank's trajectories are binned first-fit-decreasing by real tokens (`packed_slices`), every forward
(the update, the KL reference, the old-log-prob recompute) runs on the row, and its per-token
log-probs and entropy are unpacked to the padded layout before any loss sees them, so every loss
reduces over the tokens it would padded. Trajectories with no sampled token are left out of the
rows: they carry no loss (and a rank left with none still runs its zero-weight padding passes).

The forward runs in the compute dtype under autocast over float32 master weights (see
`rlfactory_nb.models.precision`), and log-probs and entropy come from `rlfactory_nb.engines.logprobs`
(chunked; no (rows, length, vocabulary) tensor) unless `logprob_chunk_tokens` is None.

The old logprobs are the rollout engine's. With `truncate_ratio` set they are recomputed by the trainer
before the first pass, and the engine's enter as truncated importance weights (TIS). Either way the
gap between the engine's and the trainer's logprob of each sampled token, before this step changes
anything, is reported as `train/logprob_gap_mean` and `_max` (a bf16 engine against a float32 master,
or vLLM's kernels against transformers', show up there first).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field, fields
from typing import Any

import torch
from torch import Tensor

from rlfactory_nb.algo.losses import kl_penalty, masked_mean
from rlfactory_nb.algo.registry import LossArgs, get_loss, loss_reduction
from rlfactory_nb.config import DEFAULTS
from rlfactory_nb.engines.logprobs import chunked_token_stats, supports_chunking
from rlfactory_nb.errors import ConfigError
from rlfactory_nb.models.precision import FLOAT32, Precision, autocast
from rlfactory_nb.train.batch import TrainBatch, first_trained_position, window_logprobs
from rlfactory_nb.train.packing import PackedRow, first_fit_decreasing, pack
from rlfactory_nb.train.parallel import gradient_sync
from rlfactory_nb.train.schedule import LRSchedule
from rlfactory_nb.train.update_metrics import UpdateTally

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UpdateSettings:
    """The knobs of `policy_update`, read from a run config by `from_config`; each default is the
    config's (`rlfactory_nb.config.DEFAULTS`), so a direct user runs what a default run does."""

    loss: str = DEFAULTS.grpo.loss
    loss_args: LossArgs = field(default_factory=LossArgs)
    ppo_epochs: int = DEFAULTS.grpo.ppo_epochs
    mini_batch_size: int = DEFAULTS.grpo.mini_batch_size
    micro_batch_size: int = DEFAULTS.grpo.micro_batch_size
    max_grad_norm: float = DEFAULTS.grpo.max_grad_norm
    kl_coef: float = DEFAULTS.grpo.kl_coef
    kl_estimator: str = DEFAULTS.grpo.kl_estimator
    entropy_coef: float = DEFAULTS.grpo.entropy_coef
    seed: int = DEFAULTS.grpo.seed
    max_tokens_per_micro_batch: int | None = DEFAULTS.grpo.max_tokens_per_micro_batch
    padding_free: bool = DEFAULTS.grpo.padding_free
    logprob_chunk_tokens: int | None = DEFAULTS.grpo.logprob_chunk_tokens
    precision: Precision = FLOAT32
    lr_schedule: LRSchedule | None = None
    """None: the optimizer's rate is left as it is"""

    @classmethod
    def from_config(cls, cfg: Any, device: torch.device | None = None) -> UpdateSettings:
        """From a RunConfig; dr_grpo's token budget defaults to the rollout's generation budget.
        `device` (where the update runs) resolves `model.dtype: auto`; None: the CPU."""
        grpo = cfg.grpo
        budget = grpo.token_budget or cfg.rollout.max_new_tokens * cfg.rollout.max_turns
        derived = ("loss", "loss_args", "precision", "lr_schedule")
        return cls(
            loss=grpo.loss,
            loss_args=LossArgs.from_config(grpo, token_budget=budget),
            precision=Precision.from_config(cfg.model, device or torch.device("cpu")),
            lr_schedule=LRSchedule.from_config(grpo),
            **{f.name: getattr(grpo, f.name) for f in fields(cls) if f.name not in derived},
        )


def make_optimizer(model: torch.nn.Module, cfg: Any) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters only (with LoRA: the adapters), in their master dtype."""
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    return torch.optim.AdamW(trainable, lr=cfg.grpo.lr, weight_decay=cfg.grpo.weight_decay)


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
    loss_reduction(settings.loss)  # an unknown loss name fails before any work
    if settings.mini_batch_size < world_size:
        raise ConfigError(
            f"grpo.mini_batch_size ({settings.mini_batch_size}) must be >= the number of policy workers "
            f"({world_size}) so that every worker trains on each mini-batch"
        )
    tally = UpdateTally()
    if settings.lr_schedule is not None:
        settings.lr_schedule.apply(optimizer, step)  # for every optimizer step of this training step
    rollout_logprobs = None
    if settings.loss_args.truncate_ratio is not None:
        rollout_logprobs = batch.old_logprobs
        batch = _with(batch, old_logprobs=recompute_logprobs(model, batch, settings))
        tally.add_gap(batch.old_logprobs, rollout_logprobs, batch.loss_mask)
    model.train()  # activation checkpointing and adapter dropout act only in training mode
    try:
        for epoch in range(settings.ppo_epochs):
            shuffle = torch.Generator().manual_seed(settings.seed * 1_000_003 + step * 1_009 + epoch)
            order = torch.randperm(batch.batch_size, generator=shuffle)  # the same on every rank
            for start in range(0, batch.batch_size, settings.mini_batch_size):
                rows = order[start : start + settings.mini_batch_size]
                mini_rollout = rollout_logprobs[rows] if rollout_logprobs is not None else None
                # Before the first optimizer step the trainer's logprobs are the engine's policy's.
                measure_gap = rollout_logprobs is None and epoch == 0 and start == 0
                _mini_batch_step(
                    model,
                    optimizer,
                    take(batch, rows),
                    mini_rollout,
                    settings,
                    reference,
                    rank,
                    world_size,
                    tally,
                    measure_gap,
                )
    finally:
        model.eval()
    metrics = tally.means()
    if metrics["train/oversized_sequences"]:
        log.warning(
            "%d trajectories were longer than grpo.max_tokens_per_micro_batch (%s) and each trained "
            "in a micro-batch of its own; raise the budget if memory allows",
            metrics["train/oversized_sequences"],
            settings.max_tokens_per_micro_batch,
        )
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
    tally: UpdateTally,
    measure_gap: bool,
) -> None:
    """One optimizer step on one mini-batch: accumulate over this rank's micro-batches, clip, step."""
    total = loss_weight(mini, settings.loss)
    per_rank = [
        micro_slices(mini, rows, settings)
        for rows in torch.tensor_split(torch.arange(mini.batch_size), world_size)
    ]
    padding = max(len(slices) for slices in per_rank) - len(per_rank[rank])
    # (rows, scale): world_size offsets the mean over ranks; padding rows take part at weight 0
    work = [(rows, float(world_size)) for rows in per_rank[rank]] + [(torch.tensor([0]), 0.0)] * padding
    optimizer.zero_grad(set_to_none=True)
    for index, (rows, scale) in enumerate(work):
        micro = take(mini, rows)
        micro_rollout = (
            rollout_logprobs[rows][:, : micro.input_ids.shape[1]] if rollout_logprobs is not None else None
        )
        with gradient_sync(model, enabled=index == len(work) - 1):
            share = loss_weight(micro, settings.loss) / max(total, 1.0)
            loss, metrics, logprobs = micro_loss(model, micro, micro_rollout, settings, reference)
            (loss * share * scale).backward()
        tally.add(metrics, share * scale)
        if scale:
            tally.count(layout_counts(micro, settings))
        if measure_gap and scale:
            tally.add_gap(logprobs.cpu(), micro.old_logprobs, micro.loss_mask)
    grad_norm = torch.nn.utils.clip_grad_norm_(
        [parameter for parameter in model.parameters() if parameter.requires_grad], settings.max_grad_norm
    )
    if hasattr(grad_norm, "full_tensor"):  # a DTensor under FSDP
        grad_norm = grad_norm.full_tensor()
    optimizer.step()
    tally.add_step(float(grad_norm))


def micro_slices(mini: TrainBatch, rows: Tensor, settings: UpdateSettings) -> list[Tensor]:
    """One rank's rows of a mini-batch (indices into it) cut into micro-batches: `micro_batch_size`
    rows each, or packed by `max_tokens_per_micro_batch`; with `padding_free`, `packed_slices`."""
    if settings.padding_free:
        return packed_slices(mini, rows, settings)
    if settings.max_tokens_per_micro_batch is None:
        return list(torch.split(rows, settings.micro_batch_size))
    lengths = mini.attention_mask[rows].sum(dim=-1)
    return [rows[part] for part in token_budget_slices(lengths, settings.max_tokens_per_micro_batch)]


def packed_slices(mini: TrainBatch, rows: Tensor, settings: UpdateSettings) -> list[Tensor]:
    """The rows with sampled tokens, one packed row per slice: first-fit-decreasing by real tokens up to
    `max_tokens_per_micro_batch` (one over it alone), or `micro_batch_size` rows each without a budget."""
    rows = rows[mini.loss_mask[rows].any(dim=-1)]  # a trajectory with nothing sampled has no loss
    if not len(rows):
        return []
    if settings.max_tokens_per_micro_batch is None:
        return list(torch.split(rows, settings.micro_batch_size))
    lengths = mini.attention_mask[rows].sum(dim=-1).tolist()
    bins = first_fit_decreasing(lengths, settings.max_tokens_per_micro_batch)
    return [rows[torch.tensor(members)] for members in bins]


def token_budget_slices(lengths: Tensor, budget: int) -> list[Tensor]:
    """Pack rows (their lengths (B,)) longest first into slices whose rows x longest row stays within
    `budget` padded tokens; a row alone over the budget gets a slice of its own (rows are never split).

    >>> [s.tolist() for s in token_budget_slices(torch.tensor([3, 9, 4, 8]), 16)]
    [[1], [3, 2], [0]]
    """
    order = torch.argsort(lengths, descending=True, stable=True).tolist()
    slices: list[list[int]] = []
    for row in order:
        current = slices[-1] if slices else None
        # sorted longest first: a slice's first row is its longest
        if current is not None and int(lengths[current[0]]) * (len(current) + 1) <= budget:
            current.append(row)
        else:
            slices.append([row])
    return [torch.tensor(rows) for rows in slices]


def micro_loss(
    model: torch.nn.Module,
    micro: TrainBatch,
    rollout_logprobs: Tensor | None,
    settings: UpdateSettings,
    reference: torch.nn.Module | None,
) -> tuple[Tensor, dict[str, float], Tensor]:
    """Policy loss (+ KL to the reference, - entropy bonus) of one micro-batch, its metrics, and the
    trainer's logprobs of its sampled tokens (B, L), detached."""
    device = _device(model)
    micro = micro.to(device)
    if rollout_logprobs is not None:
        rollout_logprobs = rollout_logprobs.to(device)
    mask = micro.loss_mask
    with autocast(device, settings.precision):
        logprobs, entropies = token_stats(model, micro, settings, entropy_grad=bool(settings.entropy_coef))
        loss, metrics = get_loss(settings.loss)(
            logprobs, micro.old_logprobs, micro.advantages, mask, settings.loss_args, rollout_logprobs
        )
        entropy = masked_mean(entropies, mask)
        metrics["entropy"] = float(entropy.detach())
        if settings.entropy_coef:
            loss = loss - settings.entropy_coef * entropy
        if reference is not None and settings.kl_coef:
            with torch.no_grad():
                reference_logprobs, _ = token_stats(reference, micro, settings, entropy_grad=False)
            kl = masked_mean(kl_penalty(logprobs, reference_logprobs, mask, settings.kl_estimator), mask)
            loss = loss + settings.kl_coef * kl
            metrics["kl"] = float(kl.detach())
    return loss, metrics, logprobs.detach()


def token_stats(
    model: torch.nn.Module, micro: TrainBatch, settings: UpdateSettings, entropy_grad: bool
) -> tuple[Tensor, Tensor]:
    """(logprobs, entropies), both (B, L) and set at the sampled tokens. With `padding_free` the
    forward runs on the micro-batch packed into one row, and both come back unpacked to (B, L)."""
    if settings.padding_free:
        row: PackedRow = pack(micro.input_ids, micro.attention_mask, micro.loss_mask)
        logprobs, entropies = forward_stats(model, row.model_inputs(), row.loss_mask, settings, entropy_grad)
        return row.unpack(logprobs), row.unpack(entropies)
    inputs = {"input_ids": micro.input_ids, "attention_mask": micro.attention_mask}
    return forward_stats(model, inputs, micro.loss_mask, settings, entropy_grad)


def forward_stats(
    model: torch.nn.Module,
    inputs: dict[str, Any],
    loss_mask: Tensor,
    settings: UpdateSettings,
    entropy_grad: bool,
) -> tuple[Tensor, Tensor]:
    """(logprobs, entropies) (b, L) of one forward over `inputs` (input_ids (b, L) and the mask or
    position ids): chunked over tokens through the model's own forward (`rlfactory_nb.engines.logprobs`),
    or from the full logits window."""
    start = first_trained_position(loss_mask)
    input_ids = inputs["input_ids"]
    if settings.logprob_chunk_tokens and supports_chunking(model):
        return chunked_token_stats(
            model, inputs, loss_mask, start, settings.logprob_chunk_tokens, settings.precision.compute
        )
    window = response_logits(model, inputs, start)  # (b, L - start + 1, V)
    logprobs = window_logprobs(window, input_ids, start)  # (b, L)
    # window[:, j] predicts token start + j: pair it with the mask from `start`, no (b, L, V) copy.
    selected = loss_mask[:, start:]
    entropies = torch.zeros_like(logprobs)
    with contextlib.nullcontext() if entropy_grad else torch.no_grad():
        log_p = torch.log_softmax(window[:, :-1][selected].float(), dim=-1)  # (N, V)
        entropies[:, start:][selected] = -(log_p.exp() * log_p).sum(dim=-1)
    return logprobs, entropies


def response_logits(model: torch.nn.Module, inputs: dict[str, Any], start: int) -> Tensor:
    """Logits of positions start-1 .. L-1 only: the prompt's positions before them are never
    trained, and their (b, start, V) logits were most of the forward's output memory and time."""
    keep = inputs["input_ids"].shape[1] - start + 1
    return model(**inputs, logits_to_keep=keep).logits


@torch.no_grad()
def recompute_logprobs(model: torch.nn.Module, batch: TrainBatch, settings: UpdateSettings) -> Tensor:
    """The trainer's own logprob of every sampled token (B, L), 0 elsewhere, before any update."""
    result = torch.zeros_like(batch.old_logprobs)
    device = _device(model)
    # The same slices on every rank (a forward is a collective under FSDP), within the token budget.
    for rows in micro_slices(batch, torch.arange(batch.batch_size), settings):
        micro = take(batch, rows).to(device)
        with autocast(device, settings.precision):
            logprobs, _ = token_stats(model, micro, settings, entropy_grad=False)
        width = logprobs.shape[1]
        result[rows, :width] = logprobs.float().cpu().masked_fill(~micro.loss_mask.cpu(), 0.0)
    return result


def layout_counts(micro: TrainBatch, settings: UpdateSettings) -> dict[str, float]:
    """The padding tokens a micro-batch's forward paid for (0 packed), and its trajectories longer
    than the token budget (each trained alone)."""
    real = micro.attention_mask.sum(dim=-1)  # (b,)
    budget = settings.max_tokens_per_micro_batch
    padding = 0.0 if settings.padding_free else float(micro.input_ids.numel() - real.sum())
    return {"padding_tokens": padding, "oversized_sequences": float((real > budget).sum()) if budget else 0.0}


def loss_weight(batch: TrainBatch, loss: str) -> float:
    """What a batch's loss is a mean over, as the loss declared (`register_loss(..., reduction=)`):
    sampled tokens, or sequences with at least one sampled token."""
    if loss_reduction(loss) == "token":
        return float(batch.loss_mask.sum())
    return float(batch.loss_mask.any(dim=-1).sum())


def take(batch: TrainBatch, rows: Tensor) -> TrainBatch:
    """The trajectories at `rows` (a 1-D index tensor), trimmed of all-padding columns."""
    return TrainBatch(**{f.name: getattr(batch, f.name)[rows] for f in fields(batch)}).trim()


def _with(batch: TrainBatch, **changes: Tensor) -> TrainBatch:
    return TrainBatch(**{f.name: changes.get(f.name, getattr(batch, f.name)) for f in fields(batch)})


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device
