import math

import pytest
import torch

from rlfactory_nb.algo import losses, registry
from rlfactory_nb.algo.losses import importance_ratio, kl_penalty, masked_entropy, masked_mean
from rlfactory_nb.algo.registry import LossArgs, get_loss, loss_names, register_loss
from rlfactory_nb.config_grpo import GRPOConfig

ARGS = LossArgs(clip_low=0.2, clip_high=0.28)
LOSSES = ["grpo", "dapo", "dr_grpo"]

# The running example: B=2, T=3; row 0 has two sampled tokens, row 1 three.
# Old logprobs are 0, so ratio = exp(logprob): the logprobs below are log(ratio).
RATIOS = [[1.5, 0.9, 1.0], [1.1, 0.7, 1.0]]
MASK = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
ADVANTAGES = torch.tensor([1.0, -1.0])
# Per-token loss -min(r A, clip(r, 0.8, 1.28) A):
#   row 0, A=+1: r=1.5 -> clipped to 1.28 -> -1.28;  r=0.9 -> -0.9
#   row 1, A=-1: r=1.1 -> 1.1;  r=0.7 -> min(-0.7, -0.8) = -0.8 (clipped) -> 0.8;  r=1.0 -> 1.0
ROW0 = [-1.28, -0.9]
ROW1 = [1.1, 0.8, 1.0]


def example(masked_value: float = 0.0):
    logprobs = torch.tensor(RATIOS).log()
    logprobs[0, 2] = masked_value
    return logprobs.requires_grad_(), torch.zeros(2, 3)


def test_grpo_is_mean_over_sequences_of_token_means():
    logprobs, old = example()
    loss, metrics = get_loss("grpo")(logprobs, old, ADVANTAGES, MASK, ARGS)
    expected = (sum(ROW0) / 2 + sum(ROW1) / 3) / 2  # (-1.09 + 0.9667) / 2 = -0.06167
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert metrics["loss"] == pytest.approx(expected, abs=1e-6)


def test_dapo_is_one_mean_over_all_tokens():
    logprobs, old = example()
    loss, _ = get_loss("dapo")(logprobs, old, ADVANTAGES, MASK, ARGS)
    assert loss.item() == pytest.approx((sum(ROW0) + sum(ROW1)) / 5, abs=1e-6)  # 0.72 / 5 = 0.144


def test_dr_grpo_divides_sums_by_the_token_budget():
    logprobs, old = example()
    loss, _ = get_loss("dr_grpo")(logprobs, old, ADVANTAGES, MASK, LossArgs(0.2, 0.28, token_budget=4))
    assert loss.item() == pytest.approx((sum(ROW0) / 4 + sum(ROW1) / 4) / 2, abs=1e-6)  # 0.09
    default, _ = get_loss("dr_grpo")(logprobs, old, ADVANTAGES, MASK, ARGS)  # budget = T = 3
    assert default.item() == pytest.approx((sum(ROW0) + sum(ROW1)) / 3 / 2, abs=1e-6)  # 0.12


def test_clip_metrics_by_hand():
    logprobs, old = example()
    _, metrics = get_loss("grpo")(logprobs, old, ADVANTAGES, MASK, ARGS)
    # clipped: row 0 token 0 (1.5 > 1.28, A>0) and row 1 token 1 (0.7 < 0.8, A<0): 2 of 5 sampled tokens
    assert metrics["clip_fraction"] == pytest.approx(0.4)
    assert metrics["clip_fraction_high"] == pytest.approx(0.2)
    assert metrics["clip_fraction_low"] == pytest.approx(0.2)
    assert metrics["ratio_mean"] == pytest.approx((1.5 + 0.9 + 1.1 + 0.7 + 1.0) / 5)  # the masked 1.0 is out
    assert metrics["ratio_max"] == pytest.approx(1.5) and metrics["ratio_min"] == pytest.approx(0.7)
    assert metrics["num_tokens"] == 5 and metrics["num_sequences"] == 2
    assert metrics["response_tokens_mean"] == 2.5


def test_grpo_gradients_vanish_exactly_on_clipped_tokens():
    logprobs, old = example()
    loss, _ = get_loss("grpo")(logprobs, old, ADVANTAGES, MASK, ARGS)
    loss.backward()
    # unclipped: d(-r A)/d logprob = -r A, weighted 1 / (B * length of the row)
    expected = [[0.0, -0.9 / (2 * 2), 0.0], [1.1 / (2 * 3), 0.0, 1.0 / (2 * 3)]]
    torch.testing.assert_close(logprobs.grad, torch.tensor(expected), rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "ratio, advantage, clipped",
    [
        (1.3, 1.0, True),  # beyond 1 + clip_high = 1.28 and pushing up: clipped
        (1.27, 1.0, False),  # inside the range
        (1.3, -1.0, False),  # above the range but pushing down: the unclipped term is smaller
        (0.79, -1.0, True),  # below 1 - clip_low = 0.8 and pushing down: clipped
        (0.79, 1.0, False),  # below the range but pushing up: not clipped
    ],
)
def test_clip_applies_only_in_the_direction_of_the_advantage(ratio, advantage, clipped):
    logprobs = torch.tensor([[math.log(ratio)]], requires_grad=True)
    loss, metrics = get_loss("dapo")(
        logprobs, torch.zeros(1, 1), torch.tensor([advantage]), torch.ones(1, 1), ARGS
    )
    loss.backward()
    bound = 1.28 if ratio > 1 else 0.8
    assert loss.item() == pytest.approx(-(bound if clipped else ratio) * advantage, abs=1e-6)
    assert logprobs.grad.item() == pytest.approx(0.0 if clipped else -ratio * advantage, abs=1e-6)
    assert metrics["clip_fraction"] == (1.0 if clipped else 0.0)


@pytest.mark.parametrize("name", LOSSES)
@pytest.mark.parametrize("junk", [123.0, -1e4, float("-inf"), float("nan")])
def test_masked_tokens_change_neither_loss_nor_gradients(name, junk):
    def run(value):
        logprobs, old = example(masked_value=value)
        old[0, 2] = -value if math.isfinite(value) else value
        loss, metrics = get_loss(name)(logprobs, old, ADVANTAGES, MASK, ARGS)
        loss.backward()
        return loss, metrics, logprobs.grad

    loss, metrics, grad = run(0.0)
    junk_loss, junk_metrics, junk_grad = run(junk)
    assert torch.equal(loss, junk_loss)
    assert torch.equal(grad, junk_grad)
    assert grad[0, 2] == 0.0
    assert metrics == junk_metrics


def test_dapo_and_grpo_weigh_tokens_of_unequal_lengths_differently():
    # row 0: 1 sampled token, A=+1; row 1: 3 sampled tokens, A=-1; all ratios 1
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]], dtype=torch.bool)
    advantages = torch.tensor([1.0, -1.0])
    results = {}
    for name in ("grpo", "dapo"):
        logprobs = torch.zeros(2, 3, requires_grad=True)
        loss, _ = get_loss(name)(logprobs, torch.zeros(2, 3), advantages, mask, ARGS)
        loss.backward()
        results[name] = (loss.item(), logprobs.grad)
    # grpo: mean(-1, +1) = 0; each sequence weighs 1/2, so the lone token gets 1/2 and the others 1/6 each
    assert results["grpo"][0] == pytest.approx(0.0)
    torch.testing.assert_close(results["grpo"][1], torch.tensor([[-1 / 2, 0, 0], [1 / 6, 1 / 6, 1 / 6]]))
    # dapo: (-1 + 3) / 4 = 0.5; every token weighs 1/4
    assert results["dapo"][0] == pytest.approx(0.5)
    torch.testing.assert_close(results["dapo"][1], torch.tensor([[-1 / 4, 0, 0], [1 / 4, 1 / 4, 1 / 4]]))


def test_dr_grpo_token_weight_does_not_depend_on_sequence_length():
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    logprobs = torch.zeros(2, 4, requires_grad=True)
    args = LossArgs(0.2, 0.28, token_budget=8)
    loss, _ = get_loss("dr_grpo")(logprobs, torch.zeros(2, 4), torch.tensor([1.0, 1.0]), mask, args)
    loss.backward()
    # loss = (-1/8 + -4/8) / 2; every sampled token's gradient is -A / (B * budget) = -1/16
    assert loss.item() == pytest.approx(-5 / 16)
    torch.testing.assert_close(logprobs.grad, torch.where(mask, -1 / 16, 0.0))


def test_dr_grpo_loss_is_unchanged_by_extra_padding_with_a_fixed_budget():
    logprobs, old = example()
    args = LossArgs(0.2, 0.28, token_budget=16)
    loss, _ = get_loss("dr_grpo")(logprobs, old, ADVANTAGES, MASK, args)
    padded = torch.cat([logprobs.detach(), torch.zeros(2, 5)], dim=1)
    padded_mask = torch.cat([MASK, torch.zeros(2, 5, dtype=torch.bool)], dim=1)
    padded_loss, _ = get_loss("dr_grpo")(padded, torch.zeros(2, 8), ADVANTAGES, padded_mask, args)
    assert padded_loss.item() == pytest.approx(loss.item())


@pytest.mark.parametrize("name", LOSSES)
def test_per_token_advantages_match_per_sequence_ones_when_constant(name):
    logprobs, old = example()
    per_sequence, _ = get_loss(name)(logprobs, old, ADVANTAGES, MASK, ARGS)
    per_token, _ = get_loss(name)(logprobs, old, ADVANTAGES.unsqueeze(-1).expand(2, 3), MASK, ARGS)
    assert per_token.item() == pytest.approx(per_sequence.item())


def test_grpo_skips_sequences_with_no_sampled_token():
    mask = torch.tensor([[1, 1], [0, 0]], dtype=torch.bool)
    loss, _ = get_loss("grpo")(torch.zeros(2, 2), torch.zeros(2, 2), torch.tensor([2.0, 5.0]), mask, ARGS)
    assert loss.item() == pytest.approx(-2.0)  # only row 0: -(1 * 2)


def test_truncated_importance_weights_scale_the_per_token_loss():
    # old == current, so the PPO ratio is 1; the rollout engine gave the tokens logprob old - log 3 and
    # old - log(1/2): weights 3 (capped at 2) and 0.5. dapo loss = -(2 * 1 + 0.5 * 1) / 2 = -1.25
    old = torch.tensor([[-1.0, -2.0]])
    rollout = old - torch.tensor([[math.log(3), math.log(0.5)]])
    args = LossArgs(0.2, 0.28, truncate_ratio=2.0)
    loss, metrics = get_loss("dapo")(old.clone(), old, torch.tensor([1.0]), torch.ones(1, 2), args, rollout)
    assert loss.item() == pytest.approx(-1.25)
    assert metrics["tis_weight_mean"] == pytest.approx(1.25)
    assert metrics["tis_truncated_fraction"] == pytest.approx(0.5)


def test_importance_ratio_is_capped_detached_and_one_off_the_mask():
    logprobs = torch.tensor([[0.0, 0.0, 5.0]], requires_grad=True)
    rollout = torch.tensor([[-math.log(3), math.log(2), 0.0]])  # ratios 3, 0.5, (masked)
    mask = torch.tensor([[1, 1, 0]])
    torch.testing.assert_close(importance_ratio(logprobs, rollout, mask), torch.tensor([[3.0, 0.5, 1.0]]))
    capped = importance_ratio(logprobs, rollout, mask, truncate_ratio=2.0)
    torch.testing.assert_close(capped, torch.tensor([[2.0, 0.5, 1.0]]))
    assert not capped.requires_grad


def test_k1_and_k3_by_hand():
    # token 0: p = 0.5, p_ref = 0.25 -> k1 = log 2 = 0.6931; k3 = 0.5 - log 0.5 - 1 = 0.1931
    # token 1: p = 0.25, p_ref = 0.5 -> k1 = -log 2;        k3 = 2 - log 2 - 1 = 0.3069
    # token 2: p = p_ref -> 0;  token 3: masked -> 0 whatever its values
    logprobs = torch.tensor([[0.5, 0.25, 0.3, 0.9]]).log()
    ref = torch.tensor([[0.25, 0.5, 0.3, 1e-30]]).log()
    mask = torch.tensor([[1, 1, 1, 0]])
    log2 = math.log(2)
    torch.testing.assert_close(kl_penalty(logprobs, ref, mask, "k1"), torch.tensor([[log2, -log2, 0.0, 0.0]]))
    k3 = torch.tensor([[0.5 + log2 - 1, 2 - log2 - 1, 0.0, 0.0]])
    torch.testing.assert_close(kl_penalty(logprobs, ref, mask, "k3"), k3)
    with pytest.raises(ValueError, match="'k1' or 'k3'"):
        kl_penalty(logprobs, ref, mask, "k2")


def test_kl_gradient_ignores_masked_tokens_with_infinite_values():
    logprobs = torch.tensor([[-1.0, float("-inf")]], requires_grad=True)
    ref = torch.tensor([[-2.0, 0.0]])
    kl = masked_mean(kl_penalty(logprobs, ref, torch.tensor([[1, 0]]), "k3"), torch.tensor([[1, 0]]))
    kl.backward()
    # d/dlp [exp(ref - lp) - (ref - lp) - 1] = -exp(ref - lp) + 1 = 1 - e^-1
    assert kl.item() == pytest.approx(math.exp(-1) + 1 - 1)
    torch.testing.assert_close(logprobs.grad, torch.tensor([[1 - math.exp(-1), 0.0]]))


def test_entropy_of_uniform_distribution_is_log_vocab_and_masked_rows_are_ignored():
    logits = torch.zeros(2, 3, 5)
    logits[0, 2] = torch.tensor([100.0, 0, 0, 0, 0])  # a peaked distribution on a masked position
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert masked_entropy(logits, mask).item() == pytest.approx(math.log(5))


def test_entropy_by_hand_for_a_two_way_distribution():
    # logits [0, log 3] -> p = [1/4, 3/4]; H = -(.25 ln .25 + .75 ln .75) = 0.5623
    # mean with a uniform 2-way row (ln 2 = 0.6931): (0.5623 + 0.6931) / 2
    logits = torch.tensor([[[0.0, math.log(3)], [0.0, 0.0]]], requires_grad=True)
    entropy = masked_entropy(logits, torch.tensor([[1, 1]]))
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert entropy.item() == pytest.approx((h + math.log(2)) / 2)
    entropy.backward()  # differentiable, for an entropy bonus
    assert logits.grad[0, 0].abs().sum() > 0


def test_entropy_with_nothing_sampled_is_zero():
    assert masked_entropy(torch.randn(1, 2, 4), torch.zeros(1, 2)).item() == 0.0


def test_masked_mean_by_hand_and_on_empty_rows():
    x = torch.tensor([[1.0, 2.0, 9.0], [4.0, float("nan"), 6.0], [7.0, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 1], [0, 0, 0]])
    assert masked_mean(x, mask).item() == pytest.approx((1 + 2 + 4 + 6) / 4)
    torch.testing.assert_close(masked_mean(x, mask, dim=-1), torch.tensor([1.5, 5.0, 0.0]))


def test_unknown_loss_names_the_known_ones():
    assert {"dapo", "dr_grpo", "grpo", "gspo"} <= set(loss_names())  # tests may register more
    with pytest.raises(KeyError, match="known losses: dapo, dr_grpo, grpo, gspo.*Did you mean 'grpo'"):
        get_loss("grpoo")


def test_register_a_custom_loss_and_refuse_a_duplicate_name():
    @register_loss("test_only_sum")
    def total(logprobs, old_logprobs, advantages, mask, args=None, rollout_logprobs=None):
        return losses.masked_sum(-logprobs, mask), {}

    try:
        loss, _ = get_loss("test_only_sum")(torch.tensor([[-1.0, -2.0]]), None, None, torch.tensor([[1, 0]]))
        assert loss.item() == 1.0
        with pytest.raises(ValueError, match="already registered"):
            register_loss("grpo")(total)
    finally:
        del registry._LOSSES["test_only_sum"]


def test_loss_args_read_from_the_run_config():
    args = LossArgs.from_config(GRPOConfig(clip_low=0.1, clip_high=0.3), token_budget=512)
    assert args == LossArgs(clip_low=0.1, clip_high=0.3, token_budget=512, truncate_ratio=None)


# ---------------------------------------------------------------- GSPO and importance-sampling levels


def test_gspo_clips_one_length_normalised_ratio_per_sequence():
    logprobs, old = example()
    args = LossArgs(clip_low=0.05, clip_high=0.05)
    loss, metrics = get_loss("gspo")(logprobs, old, ADVANTAGES, MASK, args)
    # s0 = (1.5 * 0.9) ** (1/2) = 1.1619 -> A=+1, clipped to 1.05 -> -1.05
    # s1 = (1.1 * 0.7 * 1.0) ** (1/3) = 0.9166 -> A=-1: -min(-0.9166, -0.95) = 0.95 (clipped)
    assert loss.item() == pytest.approx((-1.05 + 0.95) / 2, abs=1e-4)
    assert metrics["clip_fraction"] == pytest.approx(1.0)
    loss.backward()
    assert torch.count_nonzero(logprobs.grad) == 0  # both sequences clipped: no gradient


def test_gspo_gradient_spreads_the_sequence_ratio_over_its_tokens():
    logprobs, old = example()
    loss, _ = get_loss("gspo")(logprobs, old, ADVANTAGES, MASK, LossArgs(clip_low=0.5, clip_high=0.5))
    loss.backward()
    s0 = math.sqrt(1.5 * 0.9)
    s1 = (1.1 * 0.7) ** (1 / 3)
    # d(-s A)/d logprob_t = -A s / |y|, then / 2 sequences
    expected = [[-s0 / 2 / 2, -s0 / 2 / 2, 0.0], [s1 / 3 / 2] * 3]
    assert torch.allclose(logprobs.grad, torch.tensor(expected), atol=1e-5)
    assert registry.loss_reduction("gspo") == "sequence"


def test_importance_weights_per_sequence_are_the_product_of_token_ratios():
    trainer = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    engine = -torch.tensor([[0.2, 0.3, 9.0], [0.1, 0.1, 0.1]])  # ratio = exp(trainer - engine)
    mask = MASK
    per_sequence = importance_ratio(trainer, engine, mask, level="sequence")
    assert per_sequence[0, 0].item() == pytest.approx(math.exp(0.5))  # the masked 9.0 is out
    assert per_sequence[1, 2].item() == pytest.approx(math.exp(0.3))
    assert per_sequence[0, 2].item() == 1.0  # masked positions weigh 1
    masked = importance_ratio(trainer, engine, mask, truncate_ratio=1.5, level="sequence", mode="mask")
    assert masked[0, :2].tolist() == [0.0, 0.0] and masked[1, 0].item() == pytest.approx(math.exp(0.3))
    truncated = importance_ratio(trainer, engine, mask, truncate_ratio=1.5, mode="truncate")
    assert truncated[0, :2].tolist() == pytest.approx(
        [math.exp(0.2), min(math.exp(0.3), 1.5)]
    )


def test_decoupled_ppo_clips_against_the_proximal_policy_and_reweights_by_the_behaviour_policy():
    """AReaL's decoupled objective: ratio and clip against the trainer's recomputed (proximal)
    logprobs, times the capped proximal/behaviour weight of the engine that sampled."""
    logprobs, _ = example()
    proximal = torch.zeros(2, 3)
    behaviour = torch.full((2, 3), -math.log(4.0))  # the engine gave each token 1/4 the trainer's probability
    args = LossArgs(clip_low=0.2, clip_high=0.28, truncate_ratio=2.0)
    loss, metrics = get_loss("dapo")(logprobs, proximal, ADVANTAGES, MASK, args, behaviour)
    plain, _ = get_loss("dapo")(logprobs, proximal, ADVANTAGES, MASK, ARGS)
    assert loss.item() == pytest.approx(2.0 * plain.item(), abs=1e-6)  # weight min(4, 2) = 2 on every token
    assert metrics["tis_truncated_fraction"] == pytest.approx(1.0)
    masked, _ = get_loss("dapo")(
        logprobs, proximal, ADVANTAGES, MASK, LossArgs(truncate_ratio=2.0, importance_cap_mode="mask"), behaviour
    )
    assert masked.item() == 0.0  # every token's weight was over the cap: all masked out
