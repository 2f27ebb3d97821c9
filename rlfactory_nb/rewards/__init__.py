"""Rewards: plain functions of a `Sample`, built-ins (answer matching, math, GSM8K, ROUGE-L), `combine`,
tool verification and the runner.

def reward(sample: rf.Sample) -> float | dict[str, float]: ...
"""

from rlfactory_nb.errors import (
    InvalidRewardValue,
    JudgeError,
    JudgeParseError,
    RewardError,
    RewardLoadError,
    RewardModelError,
)
from rlfactory_nb.rewards.combine import combine
from rlfactory_nb.rewards.functions import (
    exact_match,
    f1,
    format_ok,
    gold_answers,
    length_penalty,
    normalize_answer,
    numeric_match,
    parse_number,
    tool_error_penalty,
    tool_success_rate,
)
from rlfactory_nb.rewards.judge import JudgeUsage, LLMJudge
from rlfactory_nb.rewards.loading import load_reward
from rlfactory_nb.rewards.math import gsm8k, gsm8k_answer, math_verify
from rlfactory_nb.rewards.reward_model import RewardModel, reward_model
from rlfactory_nb.rewards.runner import RewardFailure, RewardOutcome, RewardRunner
from rlfactory_nb.rewards.samples import make_sample
from rlfactory_nb.rewards.text import rouge_l
from rlfactory_nb.rewards.values import (
    RewardFunction,
    RewardValue,
    group_reward,
    is_group_reward,
    score_of,
    to_reward_value,
)
from rlfactory_nb.rewards.verify import tool_verified

__all__ = [
    "InvalidRewardValue",
    "JudgeError",
    "JudgeParseError",
    "JudgeUsage",
    "LLMJudge",
    "RewardError",
    "RewardFailure",
    "RewardFunction",
    "RewardLoadError",
    "RewardModel",
    "RewardModelError",
    "RewardOutcome",
    "RewardRunner",
    "RewardValue",
    "combine",
    "exact_match",
    "f1",
    "format_ok",
    "gold_answers",
    "group_reward",
    "gsm8k",
    "gsm8k_answer",
    "is_group_reward",
    "length_penalty",
    "load_reward",
    "make_sample",
    "math_verify",
    "normalize_answer",
    "numeric_match",
    "parse_number",
    "reward_model",
    "rouge_l",
    "score_of",
    "to_reward_value",
    "tool_error_penalty",
    "tool_success_rate",
    "tool_verified",
]
