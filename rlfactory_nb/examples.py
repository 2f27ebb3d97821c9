"""The bundled examples (examples/<name>/: config.yaml, tools.yaml, data), found from any folder.

A notebook's kernel runs in notebooks/, a papermill run wherever it was started, the CLI at the
project root; yet an example's config names files relative to the project root. `rf.example(name)`
finds the project (the working directory or a parent of it, or the checkout this package was
installed from, or $RLFACTORY_NB_EXAMPLES) and resolves those paths, so the same notebook cell works
from all three.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlfactory_nb.config import RunConfig

CONFIG_FILE = "config.yaml"


@dataclass(frozen=True)
class Example:
    name: str
    root: Path
    """the project folder holding examples/"""

    @property
    def folder(self) -> Path:
        return self.root / "examples" / self.name

    def config(self, overrides: Mapping[str, Any] | list[str] | None = None) -> RunConfig:
        """The example's run config with `overrides`; relative paths resolved against the project,
        runs written to <project>/runs unless output_dir is given."""
        cfg = RunConfig.from_yaml(self.folder / CONFIG_FILE, overrides=overrides)
        resolved: dict[str, Any] = {}
        if not Path(cfg.output_dir).is_absolute():
            resolved["output_dir"] = str(self.root / cfg.output_dir)
        if cfg.tools.config is not None and not Path(cfg.tools.config).is_absolute():
            resolved["tools.config"] = str(self.root / cfg.tools.config)
        for key in ("train", "eval"):
            source = getattr(cfg.data, key)
            if not source.startswith("synthetic:") and not Path(source).is_absolute():
                resolved[f"data.{key}"] = str(self.root / source)
        return cfg.replace(resolved) if resolved else cfg

    def dataset(self, split: str = "train", n: int | None = None) -> list[dict[str, Any]]:
        """Rows of the config's `data.train` ("train") or `data.eval` ("eval"), at most `n`."""
        from rlfactory_nb.data.rows import load_rows

        if split not in ("train", "eval"):
            raise ValueError(f'split must be "train" or "eval", got {split!r}')
        cfg = self.config()
        return load_rows(getattr(cfg.data, split), n)

    def tools(self, **settings: Any) -> Any:
        """The example's ToolSet (not started: `await tools.start()`)."""
        from rlfactory_nb.tools import ToolSet

        path = self.config().tools.config
        if path is None:
            raise ValueError(f"example {self.name!r} has no tools (tools.config is null in its config)")
        return ToolSet.from_config(path, **settings)


def project_roots() -> list[Path]:
    """Where the project folder (examples/, notebooks/) may be, most specific first."""
    roots = [Path(os.environ["RLFACTORY_NB_EXAMPLES"])] if os.environ.get("RLFACTORY_NB_EXAMPLES") else []
    cwd = Path.cwd().resolve()
    return roots + [cwd, *cwd.parents, Path(__file__).resolve().parents[1]]


def find_project(relative: str) -> Path:
    """The first project root holding `relative`; FileNotFoundError naming where it looked."""
    candidates = project_roots()
    for root in candidates:
        if (root / relative).exists():
            return root
    raise FileNotFoundError(
        f"no {relative} in {candidates[0]}, its parents or the package checkout; "
        "set RLFACTORY_NB_EXAMPLES to the project folder"
    )


def example(name: str = "calculator") -> Example:
    """The bundled example `name`; see the module docstring for where it is looked for."""
    try:
        return Example(name, find_project(f"examples/{name}/{CONFIG_FILE}"))
    except FileNotFoundError as error:
        found = sorted({p.parent.name for root in project_roots() for p in (root / "examples").glob(f"*/{CONFIG_FILE}")})
        raise FileNotFoundError(f"no example {name!r}: {error}; available: {', '.join(found) or 'none'}") from None
