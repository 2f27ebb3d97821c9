"""`load_object`: the one loader for code a setting names, as `package.module:name` or `path/to/file.py:name`.

Training jobs run on workers that only have the config, so the code a run uses is named by a string:
the reward function (`reward.function`), the environment (`rollout.env`), the agent program
(`rollout.program`), a function tool (a tools file's `functions:`), a policy loss (`grpo.loss`). They
all load here, so every key takes both forms, a dotted attribute after the colon (`module:Class.method`)
included, and every way the string can be wrong is one error, `LoadError`, that names the key it came
from, the string, and the fix:

    rollout.env: environment 'examples.shop.env:Shopp': examples.shop.env has no 'Shopp'; its classes: Shop

A `file.py:name` runs the file as a module of its own, each time it is loaded (a notebook that edits
the file gets the new code), registered in `sys.modules` so that dataclasses and pickling find it.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from rlfactory_nb.errors import LoadError
from rlfactory_nb.extras import extra_hint

Kind = Literal["function", "class"]
"""what a key takes: a function (checked to be callable) or a class (or a factory; the caller checks)"""


def load_object(
    spec: str, key: str, what: str, *, kind: Kind = "function", error: type[LoadError] = LoadError
) -> Any:
    """The object `spec` names; `key` is the setting (or argument) it came from and `what` says what
    it names there, both for the error. `error` is the LoadError subclass of the key's family
    (a reward's is RewardLoadError).

    >>> load_object("rlfactory_nb.code_names:load_object", "example.key", "loader").__name__
    'load_object'
    >>> load_object("load_object", "example.key", "loader")
    Traceback (most recent call last):
    ...
    rlfactory_nb.errors.LoadError: example.key: loader 'load_object' must look like 'package.module:function' or 'path/to/file.py:function'
    """
    said = f"{key}: {what} {spec!r}"
    noun = "Class" if kind == "class" else "function"
    # rpartition: a Windows path has a colon of its own
    where, colon, attribute = spec.rpartition(":") if isinstance(spec, str) else ("", "", "")
    if not (colon and where.strip() and attribute.strip()):
        raise error(f"{said} must look like 'package.module:{noun}' or 'path/to/file.py:{noun}'", key)
    module = _run_file(where, said, key, error) if where.endswith(".py") else _import(where, said, key, error)
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise error(f"{said}: {where} has no {attribute!r}{_listing(module, kind)}", key)
        found = getattr(found, part)
    if kind == "function" and not callable(found):
        raise error(f"{said}: {attribute!r} is a {type(found).__name__}, not a function", key)
    return found


def _listing(module: ModuleType, kind: Kind) -> str:
    """'; its functions: a, b' (or its classes), what the module offers in place of a missing name."""
    wanted = inspect.isclass if kind == "class" else callable
    names = sorted(name for name, value in vars(module).items() if wanted(value) and not name.startswith("_"))
    return f"; its {'classes' if kind == 'class' else 'functions'}: {', '.join(names)}" if names else ""


def _import(module_name: str, said: str, key: str, error: type[LoadError]) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise error(f"{said}: cannot import module {module_name!r}: {exc}{extra_hint(exc)}", key) from exc


def _run_file(path: str, said: str, key: str, error: type[LoadError]) -> ModuleType:
    file = Path(path).expanduser()
    if not file.is_file():
        raise error(f"{said}: no file {file.resolve()}", key)
    # the module name earlier runs' pickles know, hence "reward"
    module_name = f"rlfactory_nb_reward_{file.stem}_{abs(hash(file.resolve()))}"
    module_spec = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise error(f"{said}: running {file} failed: {type(exc).__name__}: {exc}{extra_hint(exc)}", key) from exc
    return module
