"""Policy losses, chosen by name, and the masked reductions, KL and entropy terms they share.

Every tensor here is aligned to the predicted token (see `rlfactory_nb.train.batch`): position t holds
the log-probability of token t, and `mask[b, t] == 1` exactly when token t was sampled by the policy.
Prompt, template and tool tokens have mask 0 and never reach a loss, KL, entropy or length metric:
their values are replaced by 0 *before* any arithmetic, so not even an inf or NaN there can leak into
the loss or its gradient.

The three registered losses share the PPO-clip per-token surrogate (Schulman et al. 2017)

    ratio_t = exp(logprob_t - old_logprob_t)
    loss_t  = -min(ratio_t * A, clip(ratio_t, 1 - clip_low, 1 + clip_high) * A)

and differ only in how per-token losses are averaged, which decides how much each token weighs:

- `grpo` (Shao et al. 2024, DeepSeekMath): mean over each sequence's tokens, then mean over sequences.
  Every sequence weighs the same, so a token of a long answer weighs less than one of a short answer.
- `dapo` (Yu et al. 2025, DAPO): one mean over all tokens of the batch, so every token weighs the same;
  meant to be used with clip-higher (clip_high > clip_low) to keep exploration alive.
- `dr_grpo` (Liu et al. 2025, "Understanding R1-Zero-Like Training"): the sum over each sequence's
  tokens divided by a constant (the generation budget), then mean over sequences: no length
  normalization, so the loss has no bias towards long wrong answers. Pair it with
  `group_advantages(..., scale=False)`.

Gradient accumulation: every loss is a mean over this call's batch and declares over what
(`register_loss(name, reduction="sequence" | "token")`), so a caller splitting one batch into
micro-batches weighs each micro-batch's loss by its share of that (tokens for `dapo`, sequences for
the others) and gets the full-batch loss exactly.

`sft` is not a policy gradient: the mean negative log-likelihood of every trained token of the
batch (supervised fine-tuning on kept trajectories, `rlfactory_nb.train.sft`), on the same rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

from rlfactory_nb.algo.registry import LossArgs, Metrics, register_loss
from rlfactory_nb.errors import ConfigError

DEFAULT_ARGS = LossArgs()
GSPO_ARGS = LossArgs(clip_low=3e-4, clip_high=4e-4)
"""the GSPO paper's clip ranges: its sequence ratio is a geometric mean, so it moves little"""

# ---------------------------------------------------------------- masked reductions


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of x where mask == 1; masked-out entries (even inf or NaN) contribute exactly 0."""
    kept = torch.where(mask.bool(), x, torch.zeros_like(x))
    return kept.sum() if dim is None else kept.sum(dim=dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of x over entries where mask == 1 (over all of them, or along `dim`); 0 where none are.

    >>> masked_mean(torch.tensor([[1.0, 2.0, 9.0]]), torch.tensor([[1, 1, 0]])).item()
    1.5
    """
    count = mask.bool().sum() if dim is None else mask.bool().sum(dim=dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1).to(x.dtype)


# ---------------------------------------------------------------- ratios, KL, entropy


def importance_ratio(
    logprobs: Tensor,
    rollout_logprobs: Tensor,
    mask: Tensor,
    truncate_ratio: float | None = None,
    level: Literal["token", "sequence"] = "token",
    mode: Literal["truncate", "mask"] = "truncate",
) -> Tensor:
    """Importance weight pi(token) / pi_rollout(token), detached; 1 where mask == 0.

    logprobs, rollout_logprobs, mask (B, T) -> (B, T).
    Rollout engines (vLLM, bf16 kernels, or weights a few versions old) sample from a slightly
    different distribution than the trainer computes. Each token is reweighted by this ratio, capped
    at `truncate_ratio` (TIS; Yao et al. 2025, "Your efficient RL framework secretly brings you
    off-policy RL training"), which bounds the variance a few wildly mismatched tokens could add.

    level "token": one ratio per token. "sequence": the product of a sequence's token ratios,
    given to each of its tokens (the whole sample is reweighted as one; Zheng et al. 2025).
    mode "truncate": ratios above the cap become the cap. "mask": tokens (or sequences) whose ratio
    exceeds the cap get weight 0, dropping the samples the engine and trainer disagree on most.

    >>> lp, rollout = torch.tensor([[0.0, 0.0]]), torch.tensor([[-1.0, 0.5]])
    >>> importance_ratio(lp, rollout, torch.ones(1, 2), 2.0)
    tensor([[2.0000, 0.6065]])
    >>> importance_ratio(lp, rollout, torch.ones(1, 2), 2.0, mode="mask")
    tensor([[0.0000, 0.6065]])
    >>> importance_ratio(lp, rollout, torch.ones(1, 2), None, level="sequence")
    tensor([[1.6487, 1.6487]])
    """
    log_ratio = (_fill(logprobs, mask) - _fill(rollout_logprobs, mask)).detach()  # (B, T)
    if level == "sequence":
        log_ratio = log_ratio.sum(dim=-1, keepdim=True).expand_as(log_ratio)
    elif level != "token":
        raise ConfigError(f"importance-sampling level must be 'token' or 'sequence', got {level!r}")
    ratio = torch.exp(log_ratio)
    ratio = torch.where(mask.bool(), ratio, torch.ones_like(ratio))
    if truncate_ratio is None:
        return ratio
    if mode == "truncate":
        return ratio.clamp(max=truncate_ratio)
    if mode == "mask":
        return torch.where(ratio > truncate_ratio, torch.zeros_like(ratio), ratio)
    raise ConfigError(f"importance-sampling mode must be 'truncate' or 'mask', got {mode!r}")


def kl_penalty(
    logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor, estimator: Literal["k1", "k3"] = "k3"
) -> Tensor:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi (Schulman 2020, "Approximating KL
    divergence"); 0 where mask == 0. logprobs, ref_logprobs, mask (B, T) -> (B, T).

    k1 = log pi - log pi_ref: unbiased, high variance, can be negative per token.
    k3 = exp(log pi_ref - log pi) - (log pi_ref - log pi) - 1: unbiased, low variance, always >= 0.
    Add `kl_coef * masked_mean(kl_penalty(...), mask)` to the loss.
    """
    log_ratio = _fill(ref_logprobs, mask) - _fill(logprobs, mask)  # log pi_ref / pi, (B, T)
    if estimator == "k1":
        per_token = -log_ratio
    elif estimator == "k3":
        per_token = torch.exp(log_ratio) - log_ratio - 1
    else:
        raise ConfigError(f"unknown KL estimator {estimator!r}; use 'k1' or 'k3'")
    return torch.where(mask.bool(), per_token, torch.zeros_like(per_token))


def masked_entropy(logits: Tensor, mask: Tensor) -> Tensor:
    """Mean entropy (nats) of the predicted distributions at mask == 1 positions; differentiable.

    logits (B, T, V) aligned like the mask (the distribution that *predicted* token t sits at t; see
    `rlfactory_nb.train.batch.shift_right`), mask (B, T) -> scalar. Only the selected rows are
    normalized, so prompt and tool positions cost nothing and contribute nothing.
    """
    selected = logits[mask.bool()].float()  # (N, V)
    if selected.shape[0] == 0:
        return logits.new_zeros(())
    log_p = torch.log_softmax(selected, dim=-1)
    return -(log_p.exp() * log_p).sum(dim=-1).mean()


# ---------------------------------------------------------------- the losses


def clipped_surrogate(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, args: LossArgs
) -> tuple[Tensor, Metrics]:
    """PPO-clip per-token loss, shared by every registered loss.

    logprobs (B, T) with grad, old_logprobs (B, T), advantages (B,) or (B, T), mask (B, T)
    -> per-token loss (B, T) (0 where mask == 0), metrics.
    """
    advantages = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages  # (B, 1) or (B, T)
    ratio = torch.exp(_fill(logprobs, mask) - _fill(old_logprobs, mask).detach())  # (B, T)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - args.clip_low, 1 + args.clip_high) * advantages
    per_token = -torch.minimum(unclipped, clipped)  # (B, T)
    per_token = torch.where(mask.bool(), per_token, torch.zeros_like(per_token))
    return per_token, _ratio_metrics(ratio.detach(), advantages.detach(), mask, args)


def _ratio_metrics(ratio: Tensor, advantages: Tensor, mask: Tensor, args: LossArgs) -> Metrics:
    # A token is clipped when the clamp, not the ratio, decides its loss: its gradient is then zero.
    high = (ratio > 1 + args.clip_high) & (advantages > 0)
    low = (ratio < 1 - args.clip_low) & (advantages < 0)
    lengths = mask.bool().sum(dim=-1).float()  # (B,)
    log_ratio = ratio.log()
    return {
        "clip_fraction": masked_mean((high | low).float(), mask).item(),
        "clip_fraction_high": masked_mean(high.float(), mask).item(),
        "clip_fraction_low": masked_mean(low.float(), mask).item(),
        "ratio_mean": masked_mean(ratio, mask).item(),
        "ratio_max": _masked_extreme(ratio, mask, torch.max),
        "ratio_min": _masked_extreme(ratio, mask, torch.min),
        "approx_kl_old": masked_mean(ratio - 1 - log_ratio, mask).item(),  # k3 of KL(old || new)
        "num_tokens": float(lengths.sum()),
        "num_sequences": float(mask.shape[0]),
        "response_tokens_mean": float(lengths.mean()) if lengths.numel() else 0.0,
    }


def _masked_extreme(x: Tensor, mask: Tensor, reduce: Callable[[Tensor], Tensor]) -> float:
    selected = x[mask.bool()]
    return float(reduce(selected)) if selected.numel() else 1.0


def _weighted(
    per_token: Tensor, old_logprobs: Tensor, mask: Tensor, args: LossArgs, rollout_logprobs: Tensor | None
) -> tuple[Tensor, Metrics]:
    """Apply TIS weights when the rollout logprobs differ from the old ones (see `importance_ratio`)."""
    if rollout_logprobs is None:
        return per_token, {}
    weight = importance_ratio(
        old_logprobs, rollout_logprobs, mask, args.truncate_ratio, args.importance_level, args.importance_cap_mode
    )  # (B, T)
    capped = args.truncate_ratio is not None
    raw = importance_ratio(old_logprobs, rollout_logprobs, mask, None, args.importance_level)
    metrics = {
        "tis_weight_mean": masked_mean(weight, mask).item(),
        "tis_truncated_fraction": masked_mean((raw > args.truncate_ratio).float(), mask).item()
        if capped
        else 0.0,
    }
    return per_token * weight, metrics


@register_loss("grpo")
def grpo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    args: LossArgs = DEFAULT_ARGS,
    rollout_logprobs: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """Token-mean within each sequence, then mean over the sequences that have sampled tokens."""
    per_token, metrics = _per_token_terms(logprobs, old_logprobs, advantages, mask, args, rollout_logprobs)
    per_sequence = masked_mean(per_token, mask, dim=-1)  # (B,)
    has_tokens = mask.bool().any(dim=-1)  # (B,): a sequence with nothing sampled has no loss to average
    loss = masked_mean(per_sequence, has_tokens)
    return loss, {"loss": loss.item(), **metrics}


@register_loss("dapo", reduction="token")
def dapo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    args: LossArgs = DEFAULT_ARGS,
    rollout_logprobs: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """One mean over every sampled token of the batch (token-level policy gradient)."""
    per_token, metrics = _per_token_terms(logprobs, old_logprobs, advantages, mask, args, rollout_logprobs)
    loss = masked_mean(per_token, mask)
    return loss, {"loss": loss.item(), **metrics}


@register_loss("dr_grpo")
def dr_grpo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    args: LossArgs = DEFAULT_ARGS,
    rollout_logprobs: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """Sum over each sequence's tokens divided by the constant token budget, then mean over the
    sequences that have sampled tokens (what `loss_weight` counts, so accumulation stays exact)."""
    per_token, metrics = _per_token_terms(logprobs, old_logprobs, advantages, mask, args, rollout_logprobs)
    budget = args.token_budget if args.token_budget is not None else mask.shape[-1]
    if budget <= 0:
        raise ConfigError(f"LossArgs.token_budget must be a positive number of tokens, got {budget}")
    has_tokens = mask.bool().any(dim=-1)  # (B,): like grpo, a sequence with nothing sampled is no sample
    loss = masked_mean(masked_sum(per_token, mask, dim=-1) / budget, has_tokens)
    return loss, {"loss": loss.item(), **metrics}


@register_loss("gspo")
def gspo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    args: LossArgs = GSPO_ARGS,
    rollout_logprobs: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization"): one length-normalised ratio
    per sequence, s = exp(mean_t (logprob_t - old_logprob_t)), clipped at the sequence level,

        loss_i = -min(s_i A_i, clip(s_i, 1 - clip_low, 1 + clip_high) A_i),

    then the mean over sequences. The paper's clip ranges are tiny (3e-4 / 4e-4, set
    grpo.clip_low / clip_high), since s is a geometric mean. Per-token advantages are averaged over
    each sequence's tokens; rollout importance weights (TIS) multiply each sequence's loss.
    """
    has_tokens = mask.bool().any(dim=-1)  # (B,)
    log_ratio = _fill(logprobs, mask) - _fill(old_logprobs, mask).detach()  # (B, T)
    ratio = torch.exp(masked_mean(log_ratio, mask, dim=-1))  # (B,)
    advantage = advantages if advantages.dim() == 1 else masked_mean(advantages, mask, dim=-1)  # (B,)
    clipped = ratio.clamp(1 - args.clip_low, 1 + args.clip_high)
    per_sequence = -torch.minimum(ratio * advantage, clipped * advantage)  # (B,)
    metrics: Metrics = {}
    if rollout_logprobs is not None:
        weight, metrics = _weighted(torch.ones_like(log_ratio), old_logprobs, mask, args, rollout_logprobs)
        per_sequence = per_sequence * masked_mean(weight, mask, dim=-1)
    loss = masked_mean(per_sequence, has_tokens)
    token_ratio = ratio.detach()[:, None].expand_as(log_ratio)
    token_advantage = advantage.detach()[:, None].expand_as(log_ratio)
    return loss, {"loss": loss.item(), **_ratio_metrics(token_ratio, token_advantage, mask, args), **metrics}


@register_loss("sft", reduction="token")
def sft_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    args: LossArgs = DEFAULT_ARGS,
    rollout_logprobs: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """Supervised fine-tuning: the mean negative log-likelihood over every trained token of the
    batch, -sum(mask * logprobs) / sum(mask). The advantages and old logprobs are not read.

    >>> lp, mask = torch.tensor([[0.0, -1.0, -3.0]]), torch.tensor([[0, 1, 1]])
    >>> sft_loss(lp, lp, torch.zeros(1), mask)[0].item()
    2.0
    """
    loss = -masked_mean(logprobs, mask)
    lengths = mask.bool().sum(dim=-1).float()  # (B,)
    return loss, {
        "loss": loss.item(),
        "num_tokens": float(lengths.sum()),
        "num_sequences": float(mask.shape[0]),
        "response_tokens_mean": float(lengths.mean()) if lengths.numel() else 0.0,
    }


def _per_token_terms(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    args: LossArgs,
    rollout_logprobs: Tensor | None,
) -> tuple[Tensor, Metrics]:
    """The clipped surrogate per token (B, T), importance-weighted against the rollout when given;
    the losses differ only in how they reduce it."""
    per_token, metrics = clipped_surrogate(logprobs, old_logprobs, advantages, mask, args)
    per_token, tis = _weighted(per_token, old_logprobs, mask, args, rollout_logprobs)
    return per_token, {**metrics, **tis}


def _fill(x: Tensor, mask: Tensor) -> Tensor:
    """x with masked-out entries replaced by 0, so that no arithmetic ever touches their values."""
    return x.masked_fill(~mask.bool(), 0.0)
