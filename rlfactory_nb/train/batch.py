"""Trajectories -> the padded tensors a policy update consumes.

Alignment, stated once for every (B, L) tensor of a `TrainBatch`: **position i is about the token at
position i**, which the model predicts from its output at position i - 1.

    loss_mask[b, i] == 1     token i was sampled by the policy (a response token with mask 1)
    old_logprobs[b, i]       the rollout engine's logprob of token i (0 where loss_mask is 0)
    token_logprobs(...)[b,i] the model's log p(token i | tokens < i); position 0 predicts nothing: 0

So per-token quantities line up with no further index arithmetic: `logprobs - old_logprobs`
is the log importance ratio of exactly the sampled tokens. A model's outputs (logits at position
i - 1 predict token i) are moved onto this alignment by `shift_right`.

Sequences are prompt_ids + response_ids, right-padded with pad_id (attention_mask 0). Position 0 is
always a prompt token, so a sampled token always has a predecessor.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor

from rlfactory_nb.types import Trajectory


@dataclass(frozen=True)
class TrainBatch:
    """One batch of trajectories as tensors; every (B, L) field uses the alignment in the module docstring."""

    input_ids: Tensor
    """(B, L) long: prompt then response tokens, right-padded"""
    attention_mask: Tensor
    """(B, L) long: 1 on real tokens, 0 on padding"""
    loss_mask: Tensor
    """(B, L) bool: True exactly where the token at that position was sampled by the policy"""
    old_logprobs: Tensor
    """(B, L) float: the rollout logprob of each sampled token, 0 elsewhere"""
    advantages: Tensor
    """(B,) one advantage per trajectory, or (B, L) one per token (per-turn rewards)"""

    def __post_init__(self) -> None:
        shape = tuple(self.input_ids.shape)
        for name in ("attention_mask", "loss_mask", "old_logprobs"):
            if tuple(getattr(self, name).shape) != shape:
                raise ValueError(
                    f"TrainBatch.{name} has shape {tuple(getattr(self, name).shape)}, expected {shape}"
                )
        if tuple(self.advantages.shape) not in ((shape[0],), shape):
            raise ValueError(
                f"TrainBatch.advantages has shape {tuple(self.advantages.shape)}, expected ({shape[0]},) or {shape}"
            )

    @property
    def batch_size(self) -> int:
        return self.input_ids.shape[0]

    @property
    def num_sampled_tokens(self) -> int:
        return int(self.loss_mask.sum())

    def to(self, device: torch.device | str) -> TrainBatch:
        return TrainBatch(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    def select(self, rows: slice) -> TrainBatch:
        """The trajectories in `rows`, with trailing all-padding columns dropped (saves compute)."""
        part = TrainBatch(**{f.name: getattr(self, f.name)[rows] for f in fields(self)})
        return part.trim()

    def trim(self) -> TrainBatch:
        """Drop trailing columns that are padding in every row; causal models give identical results."""
        filled = self.attention_mask.bool().any(dim=0).nonzero()
        length = int(filled.max()) + 1 if filled.numel() else 0
        if length == self.input_ids.shape[1]:
            return self
        cut = {f.name: getattr(self, f.name)[:, :length] for f in fields(self) if f.name != "advantages"}
        advantages = self.advantages if self.advantages.dim() == 1 else self.advantages[:, :length]
        return replace(self, **cut, advantages=advantages)


def build_batch(
    trajectories: Sequence[Trajectory],
    advantages: Tensor | Sequence[float] | Sequence[Sequence[float]],
    pad_id: int,
) -> TrainBatch:
    """Pad trajectories into a `TrainBatch`.

    advantages: one per trajectory ((B,) tensor or floats), or one per response token (a (B, R)
    tensor padded to the longest response, or a list of per-trajectory lists as long as each
    response_ids) when rewards are per turn; per-token values are placed at the response positions.
    """
    for index, traj in enumerate(trajectories):
        _check_trajectory(index, traj)
    if not trajectories:
        raise ValueError("build_batch needs at least one trajectory")
    length = max(len(t.prompt_ids) + len(t.response_ids) for t in trajectories)
    size = (len(trajectories), length)
    input_ids = torch.full(size, pad_id, dtype=torch.long)
    attention_mask = torch.zeros(size, dtype=torch.long)
    loss_mask = torch.zeros(size, dtype=torch.bool)
    old_logprobs = torch.zeros(size, dtype=torch.float32)
    for row, traj in enumerate(trajectories):
        start, end = len(traj.prompt_ids), len(traj.prompt_ids) + len(traj.response_ids)
        input_ids[row, :end] = torch.tensor(traj.prompt_ids + traj.response_ids, dtype=torch.long)
        attention_mask[row, :end] = 1
        loss_mask[row, start:end] = torch.tensor(traj.loss_mask, dtype=torch.bool)
        # logprobs has one entry per sampled token, in order: scatter them onto the mask == 1 positions.
        old_logprobs[row][loss_mask[row]] = torch.tensor(traj.logprobs, dtype=torch.float32)
    return TrainBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        loss_mask=loss_mask,
        old_logprobs=old_logprobs,
        advantages=_place_advantages(trajectories, advantages, length),
    )


def _check_trajectory(index: int, traj: Trajectory) -> None:
    if not traj.prompt_ids:
        raise ValueError(f"trajectory {index} has empty prompt_ids; a sampled token needs a preceding token")
    if len(traj.loss_mask) != len(traj.response_ids):
        raise ValueError(
            f"trajectory {index}: loss_mask has {len(traj.loss_mask)} entries but response_ids has "
            f"{len(traj.response_ids)}; the mask must cover every response token"
        )
    if sum(traj.loss_mask) != len(traj.logprobs):
        raise ValueError(
            f"trajectory {index}: {len(traj.logprobs)} logprobs for {sum(traj.loss_mask)} sampled tokens "
            "(loss_mask == 1); the engine must report one logprob per sampled token"
        )


def _place_advantages(
    trajectories: Sequence[Trajectory],
    advantages: Tensor | Sequence[float] | Sequence[Sequence[float]],
    length: int,
) -> Tensor:
    if isinstance(advantages, Tensor):
        per_trajectory = advantages.dim() == 1
    else:
        per_trajectory = all(isinstance(value, numbers.Real) for value in advantages)
    if per_trajectory:
        flat = torch.as_tensor(advantages, dtype=torch.float32)
        if flat.shape != (len(trajectories),):
            raise ValueError(f"got {flat.numel()} advantages for {len(trajectories)} trajectories")
        return flat
    if len(advantages) != len(trajectories):
        raise ValueError(
            f"got {len(advantages)} rows of per-token advantages for {len(trajectories)} trajectories"
        )
    placed = torch.zeros((len(trajectories), length), dtype=torch.float32)
    for row, (traj, values) in enumerate(zip(trajectories, advantages)):
        values = torch.as_tensor(values, dtype=torch.float32)
        response = len(traj.response_ids)
        if values.dim() != 1 or values.shape[0] < response:
            raise ValueError(
                f"trajectory {row}: per-token advantages need one value per response token ({response}), "
                f"got shape {tuple(values.shape)}"
            )
        placed[row, len(traj.prompt_ids) : len(traj.prompt_ids) + response] = values[:response]
    return placed


def shift_right(outputs: Tensor, fill: float = 0.0) -> Tensor:
    """Move per-position model outputs onto the predicted-token alignment: result[:, i] = outputs[:, i - 1].

    outputs (B, L, ...) -> (B, L, ...); position 0 (predicted by nothing) is `fill`.
    E.g. `masked_entropy(shift_right(logits), batch.loss_mask)` is the entropy of each sampled token's
    predicting distribution.
    """
    shifted = torch.full_like(outputs, fill)
    shifted[:, 1:] = outputs[:, :-1]
    return shifted


def token_logprobs(logits: Tensor, input_ids: Tensor) -> Tensor:
    """log p(input_ids[:, i] | input_ids[:, :i]) at each position i, 0 at position 0.

    logits (B, L, V) from a causal LM over input_ids (B, L) -> (B, L) float32.
    Computed as logit - logsumexp in float32, which avoids materializing a (B, L, V) log_softmax.
    """
    predicting = logits[:, :-1].float()  # (B, L-1, V): the outputs that predict tokens 1..L-1
    targets = input_ids[:, 1:].unsqueeze(-1)  # (B, L-1, 1)
    picked = predicting.gather(-1, targets).squeeze(-1) - torch.logsumexp(predicting, dim=-1)  # (B, L-1)
    return torch.cat([picked.new_zeros(picked.shape[0], 1), picked], dim=1)


def first_trained_position(loss_mask: Tensor) -> int:
    """The first column any row trains on (>= 1: position 0 predicts nothing); the last column when
    no row trains (a zero-weight padding micro-batch).

    >>> first_trained_position(torch.tensor([[0, 0, 1, 1], [0, 0, 0, 1]], dtype=torch.bool))
    2
    """
    columns = loss_mask.any(dim=0).nonzero()
    return max(1, int(columns[0])) if len(columns) else loss_mask.shape[1] - 1


def window_logprobs(window: Tensor, input_ids: Tensor, start: int) -> Tensor:
    """`token_logprobs` from the logits of positions start-1 .. L-1 only (window (B, L-start+1, V)):
    (B, L) with 0 before `start`. What a forward with `logits_to_keep=L-start+1` returns, which skips
    the (B, start, V) logits of prompt positions that nothing trains on."""
    picked = token_logprobs(window, input_ids[:, start - 1 :])[:, 1:]  # tokens start .. L-1
    return torch.cat([picked.new_zeros(picked.shape[0], start), picked], dim=1)


def micro_batches(batch: TrainBatch, size: int) -> Iterator[TrainBatch]:
    """Consecutive slices of at most `size` trajectories, each trimmed of all-padding columns."""
    if size < 1:
        raise ValueError(f"micro batch size must be >= 1, got {size}")
    for start in range(0, batch.batch_size, size):
        yield batch.select(slice(start, start + size))
