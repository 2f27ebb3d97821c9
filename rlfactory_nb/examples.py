"""The bundled examples (examples/<name>/: config.yaml, tools.yaml, data), found from any folder.

A notebook's kernel runs in notebooks/, a papermill run wherever it was started, the CLI at the
project root; yet an example's config names files relative to the project root. `rf.example(name)`
resolves those paths against the project folder, so the same notebook cell works from all three.

The project folder is one the user named, never one found by looking around: `project_dir=`, else
$RLFACTORY_NB_EXAMPLES, else the checkout this package was installed from. An example's config names
code to import (`reward: examples/x/reward.py:score`), so a lookup that walked up from the working
directory ran whatever `examples/` a folder above it held (a planted `examples/calculator/reward.py`
two levels up did, issue 44).
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


PACKAGE_PROJECT = Path(__file__).resolve().parents[1]
"""the checkout this package was installed from (an editable install or a source tree on the path)"""


def project_roots(project_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """Where the project folder (examples/, notebooks/) may be: `project_dir` alone when given, else
    $RLFACTORY_NB_EXAMPLES when set, else the package's checkout. Never the working directory or a
    folder above it."""
    if project_dir is not None:
        return [Path(project_dir).expanduser().resolve()]
    if os.environ.get("RLFACTORY_NB_EXAMPLES"):
        return [Path(os.environ["RLFACTORY_NB_EXAMPLES"]).expanduser().resolve()]
    return [PACKAGE_PROJECT]


def find_project(relative: str, project_dir: str | os.PathLike[str] | None = None) -> Path:
    """The project root holding `relative` (see `project_roots`); FileNotFoundError naming it."""
    (root,) = project_roots(project_dir)
    if (root / relative).exists():
        return root
    raise PathNotFoundError(
        f"no {relative} in the project folder {root}; pass project_dir= (the folder holding examples/ "
        "and notebooks/) or set RLFACTORY_NB_EXAMPLES to it"
    )


def example(name: str = "calculator", project_dir: str | os.PathLike[str] | None = None) -> Example:
    """The bundled example `name` in the project folder (`project_dir`, else $RLFACTORY_NB_EXAMPLES,
    else the package's checkout; see the module docstring)."""
    try:
        return Example(name, find_project(f"examples/{name}/{CONFIG_FILE}", project_dir))
    except FileNotFoundError as error:
        (root,) = project_roots(project_dir)
        found = sorted(p.parent.name for p in (root / "examples").glob(f"*/{CONFIG_FILE}"))
        raise PathNotFoundError(f"no example {name!r}: {error}; available: {', '.join(found) or 'none'}") from None
