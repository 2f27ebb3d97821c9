"""Batched next-token sampling with per-row settings, as pure tensor functions.

The hf engine serves requests with different temperatures, top-p, top-k and seeds in one batch, so
every setting is a per-row tensor. Randomness enters only as one uniform number per row (drawn from
that row's own torch.Generator), which keeps a seeded request reproducible whatever batch it joins.
"""

from __future__ import annotations

import torch


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log p(token) under the unmodified (temperature-1) distribution.

    logits: (B, V); tokens: (B,) -> (B,) float32.
    """
    return torch.log_softmax(logits.float(), dim=-1).gather(1, tokens[:, None]).squeeze(1)


def sample_tokens(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    top_k: torch.Tensor,
    uniforms: torch.Tensor,
) -> torch.Tensor:
    """Sample one token per row by inverse CDF over the temperature/top-k/top-p filtered distribution.

    logits: (B, V); temperature, top_p, uniforms: (B,) float; top_k: (B,) int (-1 = off).
    A row with temperature 0 takes the argmax. Returns (B,) int64 token ids.

    The CDF runs in token-id order, so a row's token depends only on its own settings and uniform,
    never on its batch. Only rows with top_p < 1 sort their distribution (a full-vocabulary sort per
    decoding step was half of the engine's time); top-k needs just the k-th largest logit.

    >>> logits = torch.tensor([[0.0, 2.0, 1.0]])
    >>> one = torch.ones(1)
    >>> sample_tokens(logits, one, one, torch.tensor([1]), torch.tensor([0.99])).item()  # top-k 1
    1
    >>> sample_tokens(logits, one, one, torch.tensor([-1]), torch.tensor([0.99])).item()  # last in CDF
    2
    >>> sample_tokens(logits, one, torch.tensor([0.5]), torch.tensor([-1]), torch.tensor([0.0])).item()
    1
    """
    vocab = logits.shape[-1]
    scaled = logits.float() / temperature.clamp(min=1e-6)[:, None]  # (B, V)
    probs = torch.softmax(scaled, dim=-1)
    keep = scaled == scaled.max(dim=-1, keepdim=True).values  # the most likely token always survives
    keep |= _top_k_mask(scaled, top_k) & _top_p_mask(probs, top_p)
    cdf = (probs * keep).cumsum(dim=-1)  # (B, V), unnormalised
    targets = (uniforms.to(cdf) * cdf[:, -1])[:, None]  # (B, 1)
    # right: the first token whose CDF exceeds the target, so a dropped token (zero mass) never is
    choice = torch.searchsorted(cdf, targets, right=True).clamp(max=vocab - 1)  # (B, 1)
    return torch.where(temperature == 0, logits.argmax(dim=-1), choice.squeeze(1))


def _top_k_mask(scaled: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """(B, V): the k largest logits of each row with 0 < k < V (ties at the k-th are kept); all else."""
    vocab = scaled.shape[-1]
    limited = (top_k > 0) & (top_k < vocab)
    if not limited.any():
        return torch.ones_like(scaled, dtype=torch.bool)
    largest = int(top_k[limited].max())
    kth = scaled.topk(largest, dim=-1).values.gather(1, (top_k.clamp(1, largest) - 1)[:, None])  # (B, 1)
    return ~limited[:, None] | (scaled >= kth)


def _top_p_mask(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """(B, V): for rows with top_p < 1, the most likely tokens whose preceding mass is below top_p."""
    keep = torch.ones_like(probs, dtype=torch.bool)
    rows = (top_p < 1).nonzero().squeeze(1)
    if len(rows):
        sorted_probs, order = probs[rows].sort(dim=-1, descending=True)
        keep_sorted = (sorted_probs.cumsum(dim=-1) - sorted_probs) < top_p[rows, None]
        keep[rows] = torch.zeros_like(keep_sorted).scatter(1, order, keep_sorted)
    return keep
