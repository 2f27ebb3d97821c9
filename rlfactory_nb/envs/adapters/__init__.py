"""Adapters for the environments people already have: OpenEnv servers, text games (TextArena,
SkyRL-gym) and TRL-style environment classes. Each third-party package is imported inside its adapter
when an episode starts, so this package imports without any of them (they are the `envs` extra)."""

from rlfactory_nb.envs.adapters.openenv import OpenEnvEnvironment, openenv_env
from rlfactory_nb.envs.adapters.openenv_server import OpenEnvServer
from rlfactory_nb.envs.adapters.text import SkyRLEnvironment, TextArenaEnvironment, skyrl_env, textarena_env
from rlfactory_nb.envs.adapters.trl import TRLEnvironment, trl_env

__all__ = [
    "OpenEnvEnvironment",
    "OpenEnvServer",
    "SkyRLEnvironment",
    "TRLEnvironment",
    "TextArenaEnvironment",
    "openenv_env",
    "skyrl_env",
    "textarena_env",
    "trl_env",
]
