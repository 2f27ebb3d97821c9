"""`RolloutSettings`: every `rollout.*` setting an episode is played under, read off a RunConfig once.

rf.Agent (`Agent.from_settings`) and rf.AgentProgram (`AgentProgram.bind`) both take theirs from
`RolloutSettings.from_config`, so a setting reaches a program exactly as it reaches an Agent: the chat
format and parser, the reasoning mode, the drift check, the limits, the sampling, the environment and
its seeds. A setting added to `RolloutConfig` is added here, once.

The reasoning mode a model was trained in is read by the caller that knows the model
(reasoning_mode.py): it passes it in (`trained_thinking`; runtime.py does), and an
unset mode with none recorded is the template's default, which the player reads off its tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlfactory_nb.chat import ChatFormat
from rlfactory_nb.config import DEFAULTS
from rlfactory_nb.engines.base import SamplingParams
from rlfactory_nb.errors import ConfigError
from rlfactory_nb.rollout.episodes import EpisodeLimits
from rlfactory_nb.rollout.tokens import DriftMode
from rlfactory_nb.seeds import EnvSeed
from rlfactory_nb.tools.config import ToolSetSettings


@dataclass(frozen=True)
class RolloutSettings:
    """How a player plays its episodes (module docstring)."""

    chat_format: str | ChatFormat = DEFAULTS.rollout.chat_format
    """the model family, by name or object; "auto": read off the tokenizer"""
    parser: str | Any | None = DEFAULTS.rollout.parser
    """a tool-call parser by name or object in place of the family's; None: the family's"""
    enable_thinking: bool | None = False
    """the template's reasoning mode; None: the template's default"""
    drift: DriftMode = "warn"
    """the drift check against a full render: raise, warn, or skip"""
    limits: EpisodeLimits = field(default_factory=EpisodeLimits)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    """how tokens are drawn (its max_new_tokens is the limits')"""
    env: Any = DEFAULTS.rollout.env
    """one environment per episode: a class, factory or "module:Class"; None: the run's ToolSet"""
    env_seed: EnvSeed = DEFAULTS.rollout.env_seed
    """what an episode's reset seed is shared by: its group, or nothing (seeds.py)"""

    def __post_init__(self) -> None:
        if self.env_seed not in ("group", "sample"):
            raise ConfigError(f'env_seed must be "group" or "sample", got {self.env_seed!r}')

    @classmethod
    def from_config(
        cls, cfg: Any, *, trained_thinking: bool | None = None, temperature: float | None = None,
        drift: DriftMode | None = None, env: Any = None,
    ) -> RolloutSettings:
        """The settings of `cfg.rollout` (with `cfg.tools.max_result_chars`). `trained_thinking`: the
        mode the model was trained in, used where `rollout.enable_thinking` is unset; `temperature`
        replaces the config's (0: greedy); `drift` the drift check; `env` (a class or factory from the
        kernel) `rollout.env`."""
        rollout = cfg.rollout
        temperature = rollout.temperature if temperature is None else temperature
        return cls(
            chat_format=rollout.chat_format,
            parser=rollout.parser,
            enable_thinking=trained_thinking if rollout.enable_thinking is None else rollout.enable_thinking,
            drift=drift or rollout.drift_check,
            limits=EpisodeLimits(
                max_turns=rollout.max_turns,
                max_new_tokens=rollout.max_new_tokens,
                max_total_tokens=rollout.max_total_tokens,
                max_text_chars=cfg.tools.max_result_chars or ToolSetSettings.max_result_chars,
                timeout_s=rollout.env_timeout_s,
                max_open=rollout.max_open_envs,
            ),
            sampling=SamplingParams(
                temperature=temperature, top_p=rollout.top_p if temperature else 1.0, max_new_tokens=rollout.max_new_tokens
            ),
            env=env if env is not None else rollout.env,
            env_seed=rollout.env_seed,
        )
