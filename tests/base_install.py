"""What `make demo`'s venv lacks: the modules only the project's extras install.

`make test` installs every extra, so a notebook or doc that imports one would pass here and fail a
newcomer's `make demo`. Tests that run code the way `make demo` does (the notebooks) start their
kernels with `hide_extras_env()`: a `sitecustomize` that makes those modules unimportable, as in a
base install. `.ci/run` also runs the real `make demo` in a fresh checkout first.
"""

from __future__ import annotations

import importlib.metadata as md
import os
from pathlib import Path

from packaging.requirements import Requirement

PROJECT = "rlfactory-nb"


def _closure(roots: list[tuple[str, set[str]]]) -> set[str]:
    """The installed distributions `roots` (name, extras) pull in, themselves included (normalized names)."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name, extras = todo.pop()
        key = name.lower().replace("_", "-")
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        if key in seen and not extras:
            continue
        seen.add(key)
        for text in requires:
            requirement = Requirement(text)
            envs = [{"extra": extra} for extra in extras] or [{"extra": ""}]
            if requirement.marker is None or any(requirement.marker.evaluate(env) for env in envs):
                todo.append((requirement.name, set(requirement.extras)))
    return seen


def extra_only_modules() -> set[str]:
    """Top-level modules whose distributions come only with the project's extras."""
    base = _closure([(PROJECT, set())])
    extras = set(md.metadata(PROJECT).get_all("Provides-Extra") or [])
    every = _closure([(PROJECT, extras)])
    only = every - base
    return {
        module
        for module, dists in md.packages_distributions().items()
        if dists and all(d.lower().replace("_", "-") in only for d in dists) and module.isidentifier()
    }


SITECUSTOMIZE = """\
import sys

# None in sys.modules: `import x` raises ModuleNotFoundError and importlib.util.find_spec("x") is None,
# exactly as when x is not installed (transformers and others probe optional packages with find_spec)
sys.modules.update(dict.fromkeys({hidden!r}))
"""


def hide_extras_env(folder: Path) -> dict[str, str]:
    """Environment variables under which a Python process sees a base install (a sitecustomize in `folder`)."""
    hidden = sorted(extra_only_modules())
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE.format(hidden=hidden))
    path = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH", "")]))
    return {"PYTHONPATH": path}
