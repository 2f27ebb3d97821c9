"""What sending kernel objects by value needs beyond cloudpickle: user modules pickled by value
(the cluster cannot import a notebook's helpers), and a message that names what cannot be pickled
(an open file, a lock, a client) and the variable that holds it.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import cloudpickle  # the pickler Ray uses (it vendors a copy), without importing Ray here


def transfer_problem(label: str, value: Any, error: Exception) -> str:
    """The message of an ObjectTransferError: `label` could not be pickled (`error`), what it refers to
    that is to blame, and how to fix it."""
    culprit = _culprit(value)
    return (
        f"{label} cannot travel to the cluster: pickling it failed ({type(error).__name__}: {error}).{culprit} "
        "A function is sent with everything it refers to (globals, closure variables, defaults), and open "
        "files, locks, sockets and clients cannot be sent: create them inside the function (or on its first "
        "call), then launch again."
    )


def _culprit(value: Any) -> str:
    """` It refers to 'log' (a TextIOWrapper), which cannot be pickled.`, when one variable is to blame."""
    target = getattr(value, "fn", value)
    if not inspect.isfunction(target):
        return ""
    variables = inspect.getclosurevars(target)
    named = {**variables.nonlocals, **variables.globals}
    named.update({f"default #{i}": v for i, v in enumerate(target.__defaults__ or ())})
    for name, item in named.items():
        if inspect.ismodule(item):
            continue
        try:
            cloudpickle.dumps(item)
        except Exception:  # noqa: BLE001
            return f" It refers to {name!r} (a {type(item).__name__}), which cannot be pickled."
    return ""


@contextlib.contextmanager
def pickled_by_value(modules: list[ModuleType]) -> Iterator[None]:
    """Within the block, cloudpickle sends `modules` by value (their code travels) instead of by name."""
    for module in modules:
        cloudpickle.register_pickle_by_value(module)
    try:
        yield
    finally:
        for module in modules:
            cloudpickle.unregister_pickle_by_value(module)
