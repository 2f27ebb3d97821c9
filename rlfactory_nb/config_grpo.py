"""The `grpo` section of a RunConfig: the algorithm's settings (steps, batch sizes, loss,
advantages, importance weights, checkpoints), with the rules that tie fields together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from rlfactory_nb.config_schema import (
    NonEmptyStr,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Range,
)


@dataclass(frozen=True)
class DynamicSamplingConfig:
    max_rounds: NonNegativeInt = 3
    """extra rounds of `prompts_per_step` prompts a step may draw to replace its zero-variance groups
    (0: none, the same as no dynamic sampling)"""


@dataclass(frozen=True)
class GRPOConfig:
    steps: PositiveInt = 100
    """training steps (each: rollouts -> rewards -> advantages -> update -> weight sync); one step's
    update makes ppo_epochs x ceil(trajectories / mini_batch_size) optimizer steps (4 with the defaults)"""
    prompts_per_step: PositiveInt = 16
    """distinct prompts sampled per step"""
    group_size: PositiveInt = 8
    """rollouts per prompt; advantages are relative within a group"""
    lr: PositiveFloat = 3e-4
    """AdamW learning rate (the peak, with a schedule)"""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """the rate after warmup: "constant"; "linear" or "cosine" decay from `lr` towards 0 over the
    remaining steps (see `rlfactory_nb.train.schedule`)"""
    warmup_steps: NonNegativeInt = 0
    """steps over which the rate rises linearly to `lr` (at most `steps`; 0: no warmup)"""
    weight_decay: NonNegativeFloat = 0.0
    """AdamW weight decay"""
    loss: NonEmptyStr = "grpo"
    """policy loss by registry name: "grpo" (Shao et al. 2024), "dapo" (Yu et al. 2025), "dr_grpo" (Liu et al. 2025), "gspo" (Zheng et al. 2025; sequence-level ratio, set
    clip_low/clip_high to about 3e-4/4e-4), or "module:function" for one registered in your own module"""
    clip_low: Annotated[float, Range(ge=0, lt=1)] = 0.2
    """PPO clip range below 1"""
    clip_high: NonNegativeFloat = 0.28
    """PPO clip range above 1 (DAPO's clip-higher when > clip_low)"""
    kl_coef: NonNegativeFloat = 0.0
    """weight of the KL penalty to the reference model; 0 skips the reference model"""
    kl_estimator: Literal["k1", "k3"] = "k3"
    """KL estimator (Schulman 2020): k1 = log ratio, k3 = low-variance unbiased"""
    entropy_coef: NonNegativeFloat = 0.0
    """entropy bonus weight (masked tokens only)"""
    scale_rewards: bool = True
    """divide group-centred rewards by the group std (False: Dr. GRPO)"""
    advantage: Literal["episode", "turn", "step_groups"] = "episode"
    """credit assignment. "episode": one group-relative advantage per trajectory (per turn, by
    reward-to-go, when the reward functions return `turn_scores`). "turn": every assistant turn its
    group-relative reward-to-go over per-turn rewards: an environment's `Response.reward` for that
    turn, the rest of the episode's score on its last turn. "step_groups": the episode's advantage
    plus `step_weight` times a step advantage that compares the turns of a group starting from the
    same environment state (`state()`; GiGPO, Feng et al. 2025). See `rlfactory_nb.train.credit`"""
    gamma: Annotated[float, Range(ge=0, le=1)] = 1.0
    """discount of later turns' rewards in each turn's reward-to-go ("turn" and "step_groups")"""
    step_weight: NonNegativeFloat = 1.0
    """weight of the step-group advantage added to the episode's ("step_groups"; GiGPO's omega)"""
    step_group_scope: Literal["group", "batch"] = "group"
    """where "step_groups" looks for turns from the same state: within a group (GiGPO), or across the
    step's groups ("batch"; valid where the state is what the policy observes, no hidden task in it:
    `rlfactory_nb.train.credit`)"""
    filter_zero_variance: bool = True
    """drop groups whose rewards are all equal (they carry no signal)"""
    dynamic_sampling: DynamicSamplingConfig | None = None
    """refill the dropped groups (DAPO's dynamic sampling): e.g. `{max_rounds: 3}` draws up to 3 more
    rounds of prompts until the step has `prompts_per_step` groups with signal; None: steps train on
    what is left after filtering (see `rlfactory_nb.train.selection`)"""
    mask_truncated: bool = False
    """leave trajectories cut off by a limit (max_new_tokens, max_total_tokens or max_turns: their
    finish_reason is "length" or "max_turns") out of the loss; they still count in the reward metrics
    and `rollout/truncated`"""
    ppo_epochs: PositiveInt = 1
    """passes over each step's rollouts"""
    mini_batch_size: PositiveInt = 32
    """trajectories per optimizer step within a pass"""
    micro_batch_size: PositiveInt = 16
    """trajectories per forward/backward (gradient accumulation up to mini_batch_size)"""
    max_grad_norm: PositiveFloat = 1.0
    """gradient clipping norm"""
    eval_every: NonNegativeInt = 10
    """steps between held-out evaluations (0: never)"""
    checkpoint_every: NonNegativeInt = 10
    """steps between checkpoints (0: only at the end)"""
    seed: Annotated[int, Range(ge=0, lt=2**32)] = 0
    """seed for prompt order, initialization and every sampled request (one seed per step, prompt,
    sample and turn): a synchronous run repeats its tokens and rewards per seed (docs/decisions.md)"""
    token_budget: PositiveInt | None = None
    """dr_grpo's constant loss divisor in tokens; None: rollout.max_new_tokens * rollout.max_turns"""
    truncate_ratio: PositiveFloat | None = None
    """None: old logprobs are the rollout engine's. A number: the trainer recomputes them and weights
    tokens by the engine/trainer ratio capped here (TIS, Yao et al. 2025; useful with vLLM engines)"""
    importance_level: Literal["token", "sequence"] = "token"
    """with truncate_ratio: one engine/trainer importance weight per token, or one per sequence (the
    product of its tokens' ratios; TRL's vllm_importance_sampling_mode sequence_*). Formerly `is_level`"""
    importance_cap_mode: Literal["truncate", "mask"] = "truncate"
    """with truncate_ratio: weights above it are capped ("truncate", TIS) or zeroed ("mask": the
    tokens or sequences the engine and trainer disagree on most are left out). Formerly `is_mode`"""
    max_staleness: NonNegativeInt = 0
    """asynchronous GRPO: 0 is the synchronous loop (rollout, update, sync, in turn); k >= 1 lets the
    engines generate the next steps' rollouts while the trainer updates, training on samples at most k
    weight versions behind (needs truncate_ratio, the cap of the decoupled loss's importance weight;
    see `rlfactory_nb.train.pipeline`). Colocated engines stay synchronous."""
    max_tokens_per_micro_batch: PositiveInt | None = None
    """bound micro-batches by padded tokens instead of rows: rows are sorted by length and packed
    (never split) so that rows x longest row stays under this; None: `micro_batch_size` rows each.
    With padding_free: the most real tokens of one packed row"""
    padding_free: bool = True
    """pack each micro-batch's trajectories end to end into one row, position ids restarting at 0 per
    trajectory, so no forward or backward pays for padding (`rlfactory_nb.train.packing`). Rows are
    filled first-fit-decreasing up to max_tokens_per_micro_batch real tokens (None: micro_batch_size
    trajectories per row); a trajectory longer than that is a row of its own, counted in
    train/oversized_sequences. Needs sdpa (run per sequence), eager or flash_attention_2 attention
    (checked at start); false: padded rows"""
    logprob_chunk_tokens: PositiveInt | None = 256
    """compute log-probs and entropy over chunks of this many tokens, recomputing each chunk's logits
    in backward, so no (rows, length, vocabulary) tensor is ever held (two (chunk, vocabulary) float32
    buffers are: 311 MB at Qwen3's vocabulary); None: all logits at once"""
    keep_last: NonNegativeInt = 3
    """checkpoints kept on disk (older ones are deleted; 0 keeps all)"""
    trajectories_per_step: Annotated[int, Range(ge=-1)] = 32
    """trajectories saved per step to trajectories/step_XXXXXX.jsonl (-1: all, 0: none)"""

    def field_problems(self) -> list[tuple[str, str]]:
        """Rules across fields (the builder reports them like a range): (field, problem and fix)."""
        problems = []
        if self.warmup_steps > self.steps:
            fix = "lower warmup_steps or raise steps"
            problem = f"{self.warmup_steps} is more than grpo.steps ({self.steps}): {fix}"
            problems.append(("warmup_steps", problem))
        if self.dynamic_sampling is not None and not self.filter_zero_variance:
            fix = "set grpo.filter_zero_variance: true, or dynamic_sampling: null"
            problems.append(("dynamic_sampling", f"replaces the groups filter_zero_variance drops: {fix}"))
        if self.max_staleness and self.truncate_ratio is None:
            fix = "set grpo.truncate_ratio (AReaL caps it at 5.0; 2.0 is a careful start)"
            problem = (
                f"{self.max_staleness} trains on samples from older weights, which the decoupled loss "
                f"weights by trainer/engine probability ratios capped at grpo.truncate_ratio: {fix}"
            )
            problems.append(("max_staleness", problem))
        return problems
