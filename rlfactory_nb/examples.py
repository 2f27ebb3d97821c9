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
from typing import TYPE_CHECKING, Any

from rlfactory_nb.config import RunConfig, config_paths
from rlfactory_nb.data.rows import Row, load_rows
from rlfactory_nb.errors import ConfigError, PathNotFoundError
from rlfactory_nb.runtime import Runtime, build_tools
from rlfactory_nb.tools.toolset import ToolSet

if TYPE_CHECKING:
    from rlfactory_nb.engines.base import Engine
    from rlfactory_nb.models.policy import Policy

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
        """The example's run config with `overrides`; relative paths (`config_paths`: the tools file,
        a `file.py` reward, datasets, output_dir; not a model name) resolved against the project, so
        runs are written to <project>/runs unless output_dir is given."""
        cfg = RunConfig.from_yaml(self.folder / CONFIG_FILE, overrides=overrides)
        resolved = {
            named.key: named.value(self.root / named.path)
            for named in config_paths(cfg)
            if named.kind != "model" and not named.path.is_absolute()
        }
        return cfg.replace(resolved) if resolved else cfg

    def runtime(
        self,
        policy: Policy | Engine | None = None,
        *,
        engine: Engine | None = None,
        overrides: Mapping[str, Any] | list[str] | None = None,
    ) -> Runtime:
        """The example's tools, reward and Agent, built as training builds them (`Runtime.from_config`
        over `config(overrides)`); tools not started: `await runtime.start()`."""
        return Runtime.from_config(self.config(overrides), None, policy, engine=engine)

    def dataset(self, split: str = "train", n: int | None = None) -> list[Row]:
        """Rows of the config's `data.train` ("train") or `data.eval` ("eval"), at most `n`."""
        if split not in ("train", "eval"):
            raise ConfigError(f'split must be "train" or "eval", got {split!r}')
        cfg = self.config()
        return load_rows(getattr(cfg.data, split), n)

    def tools(self, **settings: Any) -> ToolSet:
        """The example's ToolSet as a run of its config has it (the tools file's settings, then the
        config's `tools.*` keys: `build_tools`), `settings` over both; not started: `await tools.start()`."""
        tools = build_tools(self.config(), **settings)
        if tools is None:
            raise ConfigError(f"example {self.name!r} has no tools (tools.config is null in its config)")
        return tools


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
    raise PathNotFoundError(
        f"no {relative} in {candidates[0]}, its parents or the package checkout; "
        "set RLFACTORY_NB_EXAMPLES to the project folder"
    )


def example(name: str = "calculator") -> Example:
    """The bundled example `name`; see the module docstring for where it is looked for."""
    try:
        return Example(name, find_project(f"examples/{name}/{CONFIG_FILE}"))
    except FileNotFoundError as error:
        found = sorted({p.parent.name for root in project_roots() for p in (root / "examples").glob(f"*/{CONFIG_FILE}")})
        raise PathNotFoundError(f"no example {name!r}: {error}; available: {', '.join(found) or 'none'}") from None
