"""`load_reward`: a reward function named in a config file, as `module:function` or `file.py:function`.

Training jobs run on workers that only have the config, so the reward is named by a string, loaded by
the package's one loader (code_names.py); what is a reward's own is here: a run's record of a
kernel function, and a factory called with `reward.args`. Every error names the key and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlfactory_nb.code_names import load_object
from rlfactory_nb.errors import RewardLoadError
from rlfactory_nb.rewards.values import RewardFunction


def is_run_record(spec: object) -> bool:
    """Whether `spec` is a run's record of a reward from the kernel (`objects.pkl:name`, data/objects.py):
    its run folder keeps the function, so only a resume of that run can load it."""
    return isinstance(spec, str) and spec.rsplit(":", 1)[0] == "objects.pkl"


def load_reward(
    spec: str | RewardFunction,
    args: Mapping[str, Any] | None = None,
    key: str = "reward.function",
    what: str = "reward spec",
) -> RewardFunction:
    """The function named by `spec` ("package.module:function" or "path/to/file.py:function", loaded
    by `code_names.load_object`); a callable is returned as it is. With `args` (a config's
    `reward.args`) what `spec` names is a factory, and the reward is what it returns when called with
    them. `key` is the setting that named it, for the error.

    >>> load_reward("rlfactory_nb.rewards.functions:exact_match").__name__
    'exact_match'
    """
    if args:
        return _call_factory(load_reward(spec, key=key, what=what), spec, args, key)
    if callable(spec):
        return spec
    if is_run_record(spec):
        raise RewardLoadError(
            f"{key}: reward spec {spec!r} is a run's record: {spec.rsplit(':', 1)[1]!r} came from the kernel, and its "
            "run folder keeps it (code/reward.py to read, code/objects.pkl to load). Resume that run (resume=True), "
            "pass the function (reward=...), or set reward.function to a 'module:function' or 'file.py:function'",
            key,
        )
    return load_object(spec, key, what, error=RewardLoadError)


def _call_factory(factory: Any, spec: Any, args: Mapping[str, Any], key: str) -> RewardFunction:
    try:
        function = factory(**args)
    except Exception as exc:
        raise RewardLoadError(
            f"{key}: reward spec {spec!r} called with args {dict(args)}: {type(exc).__name__}: {exc}", key
        ) from exc
    if not callable(function):
        raise RewardLoadError(
            f"{key}: reward spec {spec!r} called with args {dict(args)} returned a {type(function).__name__}, "
            "not a reward function",
            key,
        )
    return function
