"""`env_factory`: the one place an `env=` argument or a config's `rollout.env` becomes an episode factory.

Every entry point resolves its environment here: `rf.Agent(env=...)`, `train_sync`, `launch` and
`rf.evaluate` (through `RunObjects.of`) and `rollout.env` (checked before any model loads). So a class
written for another framework is recognised, or refused, once and before any work:

- an `rf.Environment` subclass, or any zero-argument factory, is used as it is;
- a class written for TRL's `environment_factory` (a `reset` method, documented public methods as
  tools, an `__init__` without arguments) is wrapped with `trl_env`, as if the user had
  written `env=trl_env(C)`: TRL users pass their class unchanged;
- any other class is refused with an error that names both ways in.

A plain function is opaque until called: if it returns something that is not an Environment, the
episode fails in create with an error that names `trl_env` (rollout/episode.py).
"""

from __future__ import annotations

import inspect
from typing import Any

from rlfactory_nb.code_names import load_object
from rlfactory_nb.envs.adapters.trl import trl_env
from rlfactory_nb.envs.base import EnvFactory, Environment
from rlfactory_nb.errors import ArgumentTypeError


def env_factory(spec: Any) -> EnvFactory:
    """The factory `spec` names: an Environment subclass, a zero-argument callable, a TRL-style class
    (wrapped with `trl_env`), or "module:Class" naming one of these.

    >>> env_factory("rlfactory_nb.envs.base:Environment")().respond(None) is None
    True
    """
    if isinstance(spec, str):
        spec = load_object(spec, "rollout.env", "environment", kind="class")
    if isinstance(spec, Environment) or (not callable(spec) and callable(getattr(spec, "reset", None))):
        raise ArgumentTypeError(
            f"env= takes a class or a zero-argument factory, not an instance ({type(spec).__name__}): "
            f"each trajectory gets its own instance, e.g. env={type(spec).__name__} rather than env={type(spec).__name__}()"
        )
    if not callable(spec):
        raise ArgumentTypeError(f"env= must be an Environment class, a factory or 'module:Class', got {spec!r}")
    if inspect.isclass(spec) and not issubclass(spec, Environment):
        return _foreign_class(spec)
    return spec


def _foreign_class(cls: type) -> EnvFactory:
    """A class that is not an rf.Environment: wrapped with `trl_env` when it follows TRL's convention,
    else refused with the two ways in."""
    name = cls.__name__
    if not callable(getattr(cls, "reset", None)):
        raise ArgumentTypeError(
            f"env={name}: {name} is not an rf.Environment subclass, and has no reset() method, so it is not a "
            f"TRL-style environment either; subclass rf.Environment, or give it TRL's shape (reset(**kwargs) and "
            f"documented public methods as tools) and pass env={name} or env=trl_env({name})"
        )
    if required := _required_arguments(cls):
        raise ArgumentTypeError(
            f"env={name}: a TRL-style environment class is made with no arguments, but {name}() needs "
            f"{', '.join(required)}; pass env=trl_env(lambda: {name}(...)) with the arguments filled in"
        )
    return trl_env(cls)


def _required_arguments(cls: type) -> list[str]:
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):  # a builtin or extension type: nothing to read, TRL would call it bare
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in parameters if p.default is p.empty and p.kind in kinds]
