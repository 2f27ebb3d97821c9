"""Episodes with state: one `Environment` per trajectory (envs/base.py), today's ToolSet as the
default environment, a simulated user (envs/user.py), and adapters for the environments people
already have (envs/adapters/: third-party imports stay inside each adapter)."""

from rlfactory_nb.envs.base import (
    EnvErrorKind,
    EnvFactory,
    Environment,
    EnvReward,
    Reset,
    Response,
    Speaker,
    ToolSetEnvironment,
    bound_tools,
)
from rlfactory_nb.envs.factory import env_factory
from rlfactory_nb.envs.user import UserSimulator
from rlfactory_nb.errors import EpisodeError

__all__ = [
    "EnvErrorKind",
    "EnvFactory",
    "EnvReward",
    "Environment",
    "EpisodeError",
    "Reset",
    "Response",
    "Speaker",
    "ToolSetEnvironment",
    "UserSimulator",
    "bound_tools",
    "env_factory",
]
