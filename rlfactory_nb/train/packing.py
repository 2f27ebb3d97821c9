"""Padding-free micro-batches: a micro-batch's trajectories laid end to end in one row.

A padded micro-batch (`rlfactory_nb.train.batch`) spends rows x longest row tokens of forward and
backward on a ragged batch; packed, it spends exactly its real tokens. The row is

    input_ids     (1, T)  the micro-batch's sequences, each prompt + response, one after another
    position_ids  (1, T)  0, 1, ... restarting at 0 where each sequence starts

    cu_seq_lens_q (n + 1,) int32: 0 and where each sequence ends (and `_k`, `max_length_q`/`_k`)

and the model is called with these and **no attention mask** (and no cache). flash-attention 2 and
3 read the sequences from `cu_seq_lens_q` (their varlen kernels: each sequence pays its own L^2).
An sdpa model is switched to `PACKED_SDPA` (`rlfactory_nb.models.packed_attention`), which runs
sdpa per sequence the same way, on CPU too (`use_packed_attention`). Eager attention, and sdpa if
it is left as it is, get from transformers (5.x) a block-diagonal causal mask derived from the
restarting positions (`masking_utils.find_packed_sequence_indices`): correct, but the row then
pays T^2 attention. An attention implementation outside those gets no mask at all from
transformers, so packing is refused for it (`check_attention`) rather than silently attending
across sequences.

Only the forward is packed. Its per-token outputs (log-probs, entropy) go back to the padded (b, L)
layout of the micro-batch (`unpack`), so every loss reduction, the KL term and the metrics run
unchanged over exactly the tokens they would see padded: nothing per sequence is re-derived here.
A sequence's last token sits just before the next sequence's first token, and predicts it in the
row; that prediction is never used, since position 0 of a sequence is a prompt token (loss_mask 0).

Micro-batches are chosen by `first_fit_decreasing` over the trajectories' lengths: rows of at most
`grpo.max_tokens_per_micro_batch` real tokens. A trajectory longer than the budget is a row of its
own (never split, never dropped), counted in `train/oversized_sequences`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from rlfactory_nb.errors import ConfigError
from rlfactory_nb.models.packed_attention import PACKED_SDPA

PACKED_ATTENTION = ("eager", "sdpa", PACKED_SDPA, "flash_attention_2", "flash_attention_3")
"""attention implementations that keep a packed row's sequences apart (a mask or a varlen kernel)"""


@dataclass(frozen=True)
class PackedRow:
    """A padded micro-batch (b, L) as one row of its T real tokens, and the way back."""

    input_ids: Tensor
    """(1, T) long: the sequences end to end"""
    position_ids: Tensor
    """(1, T) long: each sequence's positions, restarting at 0"""
    loss_mask: Tensor
    """(1, T) bool: the padded loss_mask at the same tokens"""
    cu_seq_lens: Tensor
    """(n + 1,) int32: 0, then where each of the row's n sequences ends"""
    source: tuple[Tensor, Tensor]
    """(rows (T,), columns (T,)): where each packed token sits in the padded micro-batch"""
    shape: tuple[int, int]
    """the padded micro-batch's (b, L)"""

    def model_inputs(self) -> dict[str, Any]:
        """The forward's arguments: the sequence boundaries, no attention mask and no cache."""
        longest = int((self.cu_seq_lens[1:] - self.cu_seq_lens[:-1]).max())
        return {
            "input_ids": self.input_ids,
            "position_ids": self.position_ids,
            "cu_seq_lens_q": self.cu_seq_lens,
            "cu_seq_lens_k": self.cu_seq_lens,
            "max_length_q": longest,
            "max_length_k": longest,
            "use_cache": False,
        }

    def unpack(self, values: Tensor, fill: float = 0.0) -> Tensor:
        """Per-token values of the row, (1, T) or (T,), back in the padded layout (b, L); `fill`
        elsewhere. Differentiable (an index_put), so gradients reach the packed forward."""
        out = values.new_full(self.shape, fill)
        return out.index_put(self.source, values.reshape(-1))


def first_fit_decreasing(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Indices of `lengths` grouped into bins of at most `budget` in total: longest first, each into
    the first bin it fits. An item over the budget gets a bin of its own. Deterministic: ties keep
    index order, and each bin lists its items longest first.

    >>> first_fit_decreasing([3, 9, 4, 8, 20, 1], 12)
    [[4], [1, 0], [3, 2], [5]]
    """
    if budget < 1:
        raise ValueError(f"a packing budget must be >= 1 token, got {budget}")
    order = sorted(range(len(lengths)), key=lambda index: -lengths[index])
    bins: list[list[int]] = []
    room: list[int] = []
    for index in order:
        length = lengths[index]
        target = next((b for b, free in enumerate(room) if length <= free), None)
        if target is None:
            bins.append([index])
            room.append(budget - length)
        else:
            bins[target].append(index)
            room[target] -= length
    return bins


def pack(input_ids: Tensor, attention_mask: Tensor, loss_mask: Tensor) -> PackedRow:
    """The padded micro-batch (b, L), right-padded (each row's real tokens come first), as one row.

    input_ids, attention_mask, loss_mask (b, L) -> PackedRow of T = attention_mask.sum() tokens.
    """
    lengths = attention_mask.sum(dim=-1)  # (b,)
    if bool((lengths == 0).any()):
        raise ValueError("cannot pack a row with no tokens; every trajectory has at least its prompt")
    real = attention_mask.bool()  # (b, L): right padding, so row order then column order is the sequence
    rows, columns = real.nonzero(as_tuple=True)  # (T,), (T,) in row-major order
    starts = torch.cumsum(lengths, dim=0) - lengths  # (b,): where each sequence begins in the row
    offsets = torch.arange(rows.numel(), device=input_ids.device) - starts[rows]  # (T,)
    return PackedRow(
        input_ids=input_ids[rows, columns][None],
        position_ids=offsets[None],
        loss_mask=loss_mask[rows, columns][None],
        cu_seq_lens=torch.cat([starts, starts[-1:] + lengths[-1:]]).to(torch.int32),
        source=(rows, columns),
        shape=tuple(input_ids.shape),
    )


def use_packed_attention(model: Any) -> None:
    """Switch an sdpa `model` to `PACKED_SDPA`: the same attention, per sequence in a packed row
    (`check_attention` first: other implementations are kept, or refused)."""
    check_attention(model)
    if model.config._attn_implementation == "sdpa":
        model.set_attn_implementation(PACKED_SDPA)


def check_attention(model: Any) -> None:
    """A ConfigError naming the fix when `model`'s attention cannot keep packed sequences apart."""
    config = getattr(model, "config", None)
    implementation = getattr(config, "_attn_implementation", None)
    if implementation in PACKED_ATTENTION:
        return
    problem = (
        f"grpo.padding_free: the model's attention implementation {implementation!r} cannot take "
        "packed sequences (transformers gives it no block-diagonal mask, so sequences in a row "
        "would attend to each other): set grpo.padding_free: false, or load the model with "
        "attn_implementation 'sdpa' or 'flash_attention_2'"
    )
    raise ConfigError([problem])
