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

    >>> logits = torch.tensor([[0.0, 2.0, 1.0]])
    >>> one = torch.ones(1)
    >>> sample_tokens(logits, one, one, torch.tensor([1]), torch.tensor([0.99])).item()  # top-k 1
    1
    >>> sample_tokens(logits, one, one, torch.tensor([-1]), torch.tensor([0.99])).item()  # last in CDF
    0
    """
    vocab = logits.shape[-1]
    scaled = logits.float() / temperature.clamp(min=1e-6)[:, None]  # (B, V)
    sorted_logits, sorted_ids = scaled.sort(dim=-1, descending=True)  # (B, V)
    probs = torch.softmax(sorted_logits, dim=-1)
    ranks = torch.arange(vocab, device=logits.device)[None, :]  # (1, V)
    keep_k = (top_k[:, None] < 0) | (ranks < top_k[:, None])
    keep_p = (probs.cumsum(dim=-1) - probs) < top_p[:, None]  # mass before a token is below top_p
    keep = keep_k & keep_p
    keep[:, 0] = True  # the most likely token always survives
    cdf = (probs * keep).cumsum(dim=-1)  # (B, V), unnormalised
    targets = (uniforms.to(cdf) * cdf[:, -1])[:, None]  # (B, 1)
    choice = torch.searchsorted(cdf, targets).clamp(max=vocab - 1)  # (B, 1)
    sampled = sorted_ids.gather(1, choice).squeeze(1)
    return torch.where(temperature == 0, logits.argmax(dim=-1), sampled)
