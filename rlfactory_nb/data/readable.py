"""A kernel function's readable source, as cloudpickle sent it: the function, the user's own helpers
it calls (their source, recursively, under the names it uses), the modules and installed functions it
imports, and the values it captured. What runs/<name>/code/reward.py and tools.py show (objects.py),
never what runs.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import sysconfig
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

SOURCE_ATTRIBUTE = "__rlfactory_source__"
MAX_VALUE_CHARS = 400
"""a captured value is written out in the readable source when its repr is at most this long"""


def own_name(function: Callable[..., Any], default: str = "reward") -> str:
    """The name the user gave it (`def shaped` -> "shaped"); `default` for a lambda."""
    name = getattr(function, "__name__", "") or ""
    return name if name.isidentifier() else default


def keep_source(function: Callable[..., Any]) -> None:
    """Record a function's readable source (`readable_source`) on it while the defining cell or
    file is still readable: once unpickled in another kernel, `inspect.getsource` finds no cell (or
    the wrong lines of a file), and the helpers it calls have no source at all."""
    if getattr(function, SOURCE_ATTRIBUTE, None) is not None or not hasattr(function, "__dict__"):
        return
    source = _readable(function)
    if source is not None:
        with contextlib.suppress(AttributeError, TypeError):
            setattr(function, SOURCE_ATTRIBUTE, source)


def readable_source(function: Callable[..., Any]) -> str:
    """`function`'s source, preceded by what it refers to as cloudpickle sent it: imports of
    modules and installed functions, the user's own helpers (their source, recursively, under the
    names the function uses), and captured values (their repr, or a line saying what they are)."""
    kept = getattr(function, SOURCE_ATTRIBUTE, None)
    if kept is not None:
        return kept
    return _readable(function) or f"# (no source available: {function!r})\n"


def _readable(function: Callable[..., Any]) -> str | None:
    target = getattr(function, "fn", function)
    own = _source(target)
    if own is None:
        return None
    imports: list[str] = []
    values: list[str] = []
    helpers: list[str] = []
    seen: set[int] = {id(target)}
    _references(target, imports, values, helpers, seen)
    parts = [sorted(set(imports)), values, helpers]
    prelude = "".join(("\n".join(part) + "\n\n") for part in parts if part)
    return prelude + own


def _source(target: Any) -> str | None:
    try:
        source = inspect.getsource(target)
    except (OSError, TypeError):
        return None
    if "lambda" in source or f"def {getattr(target, '__name__', '')}" in source or "class " in source:
        return textwrap.dedent(source)
    return None


def _references(target: Any, imports: list[str], values: list[str], helpers: list[str], seen: set[int]) -> None:
    """Fill the three lists with what `target` refers to (module docstring of `readable_source`)."""
    if not inspect.isfunction(target):
        return
    variables = inspect.getclosurevars(target)
    for name, value in {**variables.globals, **variables.nonlocals}.items():
        if inspect.ismodule(value):
            imports.append(f"import {value.__name__}" + (f" as {name}" if name != value.__name__.split(".")[-1] or "." in value.__name__ else ""))
        elif inspect.isfunction(value) or inspect.isclass(value):
            if id(value) in seen:
                continue
            seen.add(id(value))
            source = _source(value) if _is_users(value) else None
            if source is None:
                qualname = getattr(value, "__qualname__", name)
                imports.append(f"from {value.__module__} import {qualname}" + (f" as {name}" if name != qualname else ""))
                continue
            _references(value, imports, values, helpers, seen)
            if value.__name__ != name:  # the function refers to it by another name
                source += f"\n\n{name} = {value.__name__}\n"
            helpers.append(source)
        else:
            text = repr(value)
            shown = text if len(text) <= MAX_VALUE_CHARS and _plain(value) else None
            values.append(f"{name} = {shown}" if shown else f"# {name}: a {type(value).__name__}, captured by value (in the pickle), not shown")


def _plain(value: Any) -> bool:
    """Whether `repr(value)` reads back as the value: numbers, strings and containers of them."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(_plain(item) for item in value)
    if isinstance(value, dict):
        return all(_plain(k) and _plain(v) for k, v in value.items())
    return False


def _is_users(value: Any) -> bool:
    """The user's own code (a notebook cell or a module outside installed packages and this one)."""
    module = getattr(value, "__module__", None)
    return module == "__main__" or (module is not None and sys.modules.get(module) in user_modules([value]))


def source_listing(labelled: list[tuple[str, Callable[..., Any]]], header: str) -> str:
    """The readable sources of `labelled` functions in one file, under `header` (a sentence saying
    what the file is and where the pickled copy lives: it must be true where the file is written)."""
    parts = ["".join(f"# {line}\n" for line in textwrap.wrap(header, 98))]
    for label, function in labelled:
        name = label.split("'")[1] if "'" in label else label
        own = getattr(getattr(function, "fn", function), "__name__", name)
        called = "" if own == name else f" (the function {own})"
        module = getattr(function, "__module__", "?")
        parts.append(f"\n# {label.split(' ')[0]} {name!r}{called}, defined in {module}\n{readable_source(function)}")
    return "".join(parts)


def user_modules(functions: Iterator[Callable[..., Any]] | Any) -> list[ModuleType]:
    """Modules of `functions` that are the user's own code: neither installed packages nor this one."""
    installed = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib", "stdlib")}
    package = Path(__file__).resolve().parents[1]
    found = []
    for function in functions:
        module = sys.modules.get(getattr(function, "__module__", "") or "")
        file = getattr(module, "__file__", None)
        if module is None or module.__name__ == "__main__" or file is None:
            continue
        path = Path(file).resolve()
        if not any(path.is_relative_to(root) for root in (*installed, package)) and module not in found:
            found.append(module)
    return found
