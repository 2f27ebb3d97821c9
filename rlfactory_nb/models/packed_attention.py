"""Attention over a packed row that pays for each sequence alone: sdpa, one sequence at a time.

A packed row (`rlfactory_nb.train.packing`) holds several sequences end to end. transformers'
stock `sdpa` keeps them apart with a dense (T, T) block-diagonal mask, so the row's attention
costs T^2 whatever the sequences' lengths: a 4,096-token row of sixteen 256-token sequences pays
16x the attention it needs. flash-attention 2 and 3 pay only the sum of each sequence's L^2 (their
varlen kernels read `cu_seq_lens_q`), but they need a GPU and the flash-attn package.

`PACKED_SDPA` is sdpa with that property everywhere (CPU, or a GPU without flash-attn): given the
row's sequence boundaries it runs `scaled_dot_product_attention(is_causal=True)` on each sequence's
slice of queries, keys and values and lays the outputs end to end. Any other call (a padded batch,
generation with a KV cache) goes to transformers' sdpa unchanged, so a model switched to it
behaves exactly as with `sdpa` outside packed forwards.

The boundaries are the row's `cu_seq_lens_q` ((n + 1,) int32: 0, end of sequence 1, ..., T), the
keyword transformers' flash-attention path reads too (`FlashAttentionKwargs`); a packed row passes
it to the model (`PackedRow.model_inputs`), and the model hands it to every attention layer.

Registered with transformers' `AttentionInterface` and `AttentionMaskInterface` at import; the mask
function is sdpa's, so a padded batch gets the mask it always had (a packed row's dense mask is
still built once per forward, and ignored here).
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import torch
from torch import Tensor
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

PACKED_SDPA = "sdpa_packed"
"""the attention implementation name a padding-free run switches an sdpa model to"""


def sequence_bounds(cu_seq_lens: Tensor) -> list[tuple[int, int]]:
    """(start, end) of each sequence of a packed row from its cumulative lengths (0, l1, l1+l2, ...).

    >>> sequence_bounds(torch.tensor([0, 3, 5, 9]))
    [(0, 3), (3, 5), (5, 9)]
    """
    return list(pairwise(cu_seq_lens.tolist()))


def packed_sdpa_forward(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    cu_seq_lens_q: Tensor | None = None,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """transformers' attention-function signature: query (1, heads, T, d), key and value
    (1, kv_heads, T, d) -> ((1, T, heads, d), None). Per sequence when `cu_seq_lens_q` is given for
    a row without a cache (keys as long as queries), else transformers' sdpa."""
    packed = cu_seq_lens_q is not None and query.shape[0] == 1 and key.shape[2] == query.shape[2]
    if not packed:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    dropout = dropout if module.training else 0.0
    outputs = [
        torch.nn.functional.scaled_dot_product_attention(
            query[:, :, start:end],
            key[:, :, start:end],
            value[:, :, start:end],
            dropout_p=dropout,
            scale=scaling,
            is_causal=True,
        )
        for start, end in sequence_bounds(cu_seq_lens_q)
    ]
    return torch.cat(outputs, dim=2).transpose(1, 2).contiguous(), None


AttentionInterface.register(PACKED_SDPA, packed_sdpa_forward)
ALL_MASK_ATTENTION_FUNCTIONS.register(PACKED_SDPA, sdpa_mask)
