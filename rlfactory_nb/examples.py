"""The bundled examples (examples/<name>/: config.yaml, tools.yaml, data), found from any folder.

A notebook's kernel runs in notebooks/, a papermill run wherever it was started, the CLI at the
project root; yet an example's config names files relative to the project root. `rf.example(name)`
resolves those paths against the project folder, so the same notebook cell works from all three.

The project folder is one the user named, never one found by looking around: `project_dir=`, else
$RLFACTORY_NB_EXAMPLES, else the checkout this package was installed from. An example's config names
code to import (`reward: examples/x/reward.py:score`), so a lookup that walked up from the working
directory ran whatever `examples/` a folder above it held (a planted `examples/calculator/reward.py`
two levels up did, issue 44).

An example also declares what the notebooks show with it (examples/<name>/notebook.yaml,
`Example.notebook`): notebook 01's demo prompt and tool call to try by hand, the rewards notebook
02's lab scores side by side, and the held-out set notebooks 03-04 evaluate on. So
`example="nl2sql"` sends an NL2SQL question and a `sql` call, and `example="gsm8k"` scores with
`rf.rewards.gsm8k`, not the calculator's.

The notebooks build what the example's run builds: `open_tools` gives the tools to call by hand (for
an environment example, shop or guess, those of one open episode, since each episode binds its own)
and `agent` the run's agent (`Runtime.agent`: the loop over the tools or the episodes, or the agent
program of agents_sdk).
"""

from __future__ import annotations

import html
import inspect
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlfactory_nb.config import RunConfig, config_paths
from rlfactory_nb.config_schema import build, load_yaml
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.data.rows import Row, load_rows
from rlfactory_nb.envs.base import bound_tools
from rlfactory_nb.envs.factory import env_factory
from rlfactory_nb.errors import ConfigError, PathNotFoundError
from rlfactory_nb.extras import missing_extra
from rlfactory_nb.runtime import Runtime, build_tools
from rlfactory_nb.tools.toolset import ToolSet

if TYPE_CHECKING:
    from rlfactory_nb.engines.base import Engine
    from rlfactory_nb.models.policy import Policy

CONFIG_FILE = "config.yaml"
NOTEBOOK_FILE = "notebook.yaml"


@dataclass(frozen=True)
class NotebookDefaults:
    """What notebooks 01-04 use for an example (its notebook.yaml); a notebook parameter left None
    takes the value from here."""

    demo_prompt: str
    """notebook 01's first rollout: the user's message (after the system prompt the example's rows
    carry, if they carry one)"""
    tool_call: dict[str, Any] | None
    """notebook 01's call to try by hand: `{"name": tool, "arguments": {...}}`, a tool the example has
    (for an environment example, a tool of one open episode); None: the example has no tool to call
    (an environment that reads each answer, as guess)"""
    lab_rewards: dict[str, str]
    """notebook 02's rewards of the example, `name: module:function`; the first is the one its config
    trains with"""
    eval_set: str = "eval"
    """what notebooks 03-04 evaluate on: "eval" (the config's data.eval) or a rows file"""
    requires: tuple[str, ...] = ()
    """the optional extras of pyproject.toml the example needs (agents_sdk: `programs`); `make demo`
    installs none, so a notebook checks `Example.missing_extra` and skips the example, naming them"""

    @classmethod
    def from_file(cls, path: Path) -> NotebookDefaults:
        data = load_yaml(path.read_text(encoding="utf-8"), str(path)) or {}
        return build(cls, data, str(path))


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

    @property
    def notebook(self) -> NotebookDefaults:
        """What the notebooks use for this example (module docstring); FileNotFoundError naming the
        file when the example declares none."""
        path = self.folder / NOTEBOOK_FILE
        if not path.is_file():
            raise PathNotFoundError(f"example {self.name!r} declares no notebook defaults: add {path} (see examples/calculator/)")
        return NotebookDefaults.from_file(path)

    @property
    def missing_extra(self) -> str | None:
        """None when the extras the example needs (`notebook.requires`) are installed; else one line
        naming the extra and the command that installs it."""
        for extra in self.notebook.requires:
            if (missing := missing_extra(extra)) is not None:
                return f"the {self.name} example {missing}"
        return None

    def demo_messages(self, prompt: str | None = None) -> list[dict[str, str]]:
        """Notebook 01's prompt: the system prompt of the example's rows (when they have one), then
        `prompt` (default: the example's demo prompt) as the user's message."""
        first = self.dataset("train", 1)[0].get("messages", [])
        system = [dict(message) for message in first[:1] if message.get("role") == "system"]
        return [*system, {"role": "user", "content": prompt or self.notebook.demo_prompt}]

    def demo_input(self, prompt: str | None = None) -> list[dict[str, str]] | Row:
        """What notebook 01 rolls out: `demo_messages(prompt)`; for an environment example the first
        training row with those messages, since its episode reads the row's other fields (shop: the
        customer's instructions, guess: the secret)."""
        messages = self.demo_messages(prompt)
        if self.config().rollout.env is None:
            return messages
        return {**self.dataset("train", 1)[0], "messages": messages}

    def lab_rewards(self) -> dict[str, Any]:
        """The example's rewards for notebook 02's lab, by name (loaded from their specs)."""
        from rlfactory_nb.rewards.loading import load_reward  # deferred: rewards load their recipes

        return {name: load_reward(spec) for name, spec in self.notebook.lab_rewards.items()}

    def eval_rows(self, n: int | None = None) -> list[Row]:
        """The held-out rows the notebooks evaluate on (`notebook.eval_set`), at most `n`."""
        eval_set = self.notebook.eval_set
        if eval_set == "eval":
            return self.dataset("eval", n)
        path = Path(eval_set)
        return load_rows(str(path if path.is_absolute() else self.root / path), n)

    def changes(self, cfg: RunConfig) -> ConfigChanges:
        """What `cfg` changes from this example's config: the keys to read in a notebook, rather than
        the whole YAML (about 110 lines)."""
        return ConfigChanges(self.name, tuple(_differences(self.config().to_dict(), cfg.to_dict())))

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

    async def open_tools(self, cfg: RunConfig | None = None) -> ToolSet:
        """The tools of `cfg` (default: the example's config) to call by hand, started: the run's
        ToolSet (`build_tools`); for an environment example (`rollout.env`), whose tools are each
        episode's, the `@rf.tool` methods of one episode reset with the first training row (seed 0),
        as a ToolSet; an empty ToolSet when the episode has none (guess reads each answer)."""
        cfg = cfg or self.config()
        if cfg.rollout.env is None:
            tools = build_tools(cfg)
            if tools is None:
                raise ConfigError(f"example {self.name!r} has neither tools (tools.config) nor an environment (rollout.env)")
            return await tools.start()
        episode = env_factory(cfg.rollout.env)()
        reset = episode.reset(self.dataset("train", 1)[0], seed=0)
        if inspect.isawaitable(reset):
            await reset
        return await ToolSet.from_functions(*bound_tools(episode).values()).start()

    async def call_by_hand(self, tools: ToolSet, call: Mapping[str, Any] | None = None) -> Any:
        """Notebook 01's call by hand: `call` (default: the example's `notebook.tool_call`) on `tools`
        (`open_tools`), its ToolResult; a one-line note when the example has no tool to call."""
        call = call or self.notebook.tool_call
        if not call:
            return f"the {self.name} example has no tool to call by hand: its environment reads each answer"
        return await tools.call(call["name"], call.get("arguments"))

    def agent(
        self, cfg: RunConfig, policy: Policy | None, tools: ToolSet | None = None, *, engine: Engine | None = None
    ) -> Any:
        """The agent `cfg`'s run builds (`Runtime.agent`): the built-in loop over `tools`; for an
        environment example the loop over its episodes (each binds its own tools, `tools` unused);
        for a `rollout.program` the AgentProgram bound to `tools`."""
        run_tools = tools if cfg.rollout.env is None else None
        return Runtime(cfg, run_tools, RunObjects(), policy, engine).agent()

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


@dataclass(frozen=True)
class ConfigChanges:
    """(key, the example's value, this config's value) of every key that differs; a table in a notebook."""

    example: str
    rows: tuple[tuple[str, Any, Any], ...]

    def __repr__(self) -> str:
        if not self.rows:
            return f"the {self.example} example's config, unchanged"
        lines = [f"changed from the {self.example} example's config ({len(self.rows)} keys):"]
        return "\n".join(lines + [f"  {key}: {old!r} -> {new!r}" for key, old, new in self.rows])

    def _repr_html_(self) -> str:
        if not self.rows:
            return f"<div>{html.escape(repr(self))}</div>"
        cells = "".join(
            f"<tr><td style='text-align:left'><code>{html.escape(key)}</code></td><td style='text-align:left'>"
            f"{html.escape(repr(old))}</td><td style='text-align:left'><b>{html.escape(repr(new))}</b></td></tr>"
            for key, old, new in self.rows
        )
        return (
            f"<div>changed from the <b>{html.escape(self.example)}</b> example's config ({len(self.rows)} keys; "
            "<code>cfg.to_yaml()</code> shows it whole)</div><table class='rf-config-changes'><tr>"
            f"<th style='text-align:left'>key</th><th style='text-align:left'>example</th><th style='text-align:left'>this run</th></tr>{cells}</table>"
        )


def _differences(before: Mapping[str, Any], after: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted key, before, after) where they differ; sections present on both sides are walked."""
    found = []
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key)
        if isinstance(old, Mapping) and isinstance(new, Mapping) and key != "kernel_objects":
            found += _differences(old, new, f"{prefix}{key}.")
        elif old != new:
            found.append((f"{prefix}{key}", old, new))
    return found


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
