"""`load_reward`: a reward function named in a config file, as `module:function` or `file.py:function`.

Training jobs run on workers that only have the config, so the reward is named by a string. Every way
that string can be wrong gets its own error naming the spec and the fix.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlfactory_nb.errors import RewardLoadError
from rlfactory_nb.extras import extra_hint
from rlfactory_nb.rewards.values import RewardFunction


def is_run_record(spec: object) -> bool:
    """Whether `spec` is a run's record of a reward from the kernel (`objects.pkl:name`, data/objects.py):
    its run folder keeps the function, so only a resume of that run can load it."""
    return isinstance(spec, str) and spec.rsplit(":", 1)[0] == "objects.pkl"


def load_reward(spec: str | RewardFunction, args: Mapping[str, Any] | None = None) -> RewardFunction:
    """The function named by `spec` ("package.module:function" or "path/to/file.py:function");
    a callable is returned as it is. With `args` (a config's `reward.args`) what `spec` names is a
    factory, and the reward is what it returns when called with them.

    >>> load_reward("rlfactory_nb.rewards.functions:exact_match").__name__
    'exact_match'
    """
    if args:
        return _call_factory(load_reward(spec), spec, args)
    if callable(spec):
        return spec
    if not isinstance(spec, str) or ":" not in spec:
        raise RewardLoadError(
            f"reward spec {spec!r} must look like 'package.module:function' or 'path/to/file.py:function'"
        )
    where, name = spec.rsplit(":", 1)  # rsplit: a Windows path has a colon of its own
    if is_run_record(spec):
        raise RewardLoadError(
            f"reward spec {spec!r} is a run's record: {name!r} came from the kernel, and its run folder keeps it "
            "(code/reward.py to read, code/objects.pkl to load). Resume that run (resume=True), pass the function "
            "(reward=...), or set reward.function to a 'module:function' or 'file.py:function'"
        )
    module = _load_file(where, spec) if where.endswith(".py") else _import(where, spec)
    if not hasattr(module, name):
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise RewardLoadError(
            f"reward spec {spec!r}: {where} has no {name!r}; its functions: {', '.join(public)}"
        )
    function = getattr(module, name)
    if not callable(function):
        raise RewardLoadError(
            f"reward spec {spec!r}: {name!r} is a {type(function).__name__}, not a function"
        )
    return function


def _call_factory(factory: Any, spec: Any, args: Mapping[str, Any]) -> RewardFunction:
    try:
        function = factory(**args)
    except Exception as exc:
        raise RewardLoadError(
            f"reward spec {spec!r} called with args {dict(args)}: {type(exc).__name__}: {exc}"
        ) from exc
    if not callable(function):
        raise RewardLoadError(
            f"reward spec {spec!r} called with args {dict(args)} returned a {type(function).__name__}, "
            "not a reward function"
        )
    return function


def _import(module_name: str, spec: str):
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise RewardLoadError(f"reward spec {spec!r}: cannot import module {module_name!r}: {exc}{extra_hint(exc)}") from exc


def _load_file(path: str, spec: str):
    file = Path(path).expanduser()
    if not file.is_file():
        raise RewardLoadError(f"reward spec {spec!r}: no file {file.resolve()}")
    module_name = f"rlfactory_nb_reward_{file.stem}_{abs(hash(file.resolve()))}"
    module_spec = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise RewardLoadError(
            f"reward spec {spec!r}: running {file} failed: {type(exc).__name__}: {exc}{extra_hint(exc)}"
        ) from exc
    return module
