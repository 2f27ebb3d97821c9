"""The RL math as pure tensor functions: group-relative advantages and policy losses by name."""

from rlfactory_nb.algo.advantages import (
    group_advantages,
    reward_to_go,
    step_group_advantages,
    turn_advantages,
    turn_index,
    zero_variance_groups,
)
from rlfactory_nb.algo.losses import (
    clipped_surrogate,
    importance_ratio,
    kl_penalty,
    masked_entropy,
    masked_mean,
    masked_sum,
)
from rlfactory_nb.algo.registry import (
    LossArgs,
    PolicyLoss,
    get_loss,
    loss_names,
    loss_reduction,
    register_loss,
)

__all__ = [
    "LossArgs",
    "PolicyLoss",
    "clipped_surrogate",
    "get_loss",
    "group_advantages",
    "importance_ratio",
    "kl_penalty",
    "loss_names",
    "loss_reduction",
    "masked_entropy",
    "masked_mean",
    "masked_sum",
    "register_loss",
    "reward_to_go",
    "step_group_advantages",
    "turn_advantages",
    "turn_index",
    "zero_variance_groups",
]
