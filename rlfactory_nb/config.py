"""Run configuration: nested frozen dataclasses, loaded from YAML or a dict, with dotted overrides.

Every field has a docstring and, in its annotation, its range (`steps: PositiveInt`); a config file
can only name fields that exist. A typo, a wrong type, a value out of range or a missing required
field raises one `ConfigError` that lists every problem with its key path and, for typos, the closest
valid key (the checking lives in `rlfactory_nb.config_schema`). The sections live in their own
modules (config_sections.py: model, tools, rollout, reward, data; config_grpo.py; config_cluster.py);
this one composes them into a RunConfig. Papermill parameters arrive as a flat
dict of dotted keys (`{"grpo.lr": 1e-6}`), which `RunConfig.from_dict(..., overrides=...)` accepts
like the CLI's `grpo.lr=1e-6`.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml

from rlfactory_nb.config_cluster import ClusterConfig
from rlfactory_nb.config_distill import DistillConfig
from rlfactory_nb.config_grpo import GRPOConfig
from rlfactory_nb.config_schema import ConfigError, NonEmptyStr, NonNegativeInt, build, folder_name, load_yaml
from rlfactory_nb.config_sections import DataConfig, ModelConfig, RewardConfig, RolloutConfig, ToolsConfig
from rlfactory_nb.config_sft import SFTConfig
from rlfactory_nb.storage import is_uri, join


@dataclass(frozen=True)
class RunConfig:
    name: Annotated[str, folder_name]
    """the run's name: its folder under output_dir and its Ray job name"""
    output_dir: NonEmptyStr = "runs"
    """where metrics, trajectories and checkpoints go: a local folder, or a URI every node reaches
    (file:///shared/runs, s3://bucket/runs, gs://...; storage.py) for a job spread over nodes"""
    wandb_project: NonEmptyStr | None = None
    """also log every metrics row to this Weights & Biases project (`pip install '.[wandb]'`, then
    `wandb login`, or WANDB_MODE=offline to write locally); a resumed run continues the same W&B run"""
    samples_per_step: NonNegativeInt = 8
    """trajectories shown each step in the trackers: a W&B `samples` table and TensorBoard text with
    the prompt, tool calls, answer, reward and advantage of the step's first ones (0: none)"""
    model: ModelConfig = field(default_factory=ModelConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    data: DataConfig = field(default_factory=DataConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    """supervised fine-tuning (`rlfactory-nb sft`, `rf.sft_sync`, `rf.rejection_sampling`): config_sft.py"""
    distill: DistillConfig | None = None
    """on-policy distillation from a teacher (rlfactory_nb/config_distill.py); None: none"""
    kernel_objects: dict[str, Any] = field(default_factory=dict)
    """written by a run, never read: the objects from the kernel it trained with instead of what
    this config named (reward, tools, rows: name, module, the sha256 of the readable source kept in
    the run's code/; data/objects.py); empty when everything came from the config"""

    @property
    def run_dir(self) -> Path | str:
        """output_dir / name: a local Path, or a URI (a str) when output_dir is one (storage.py)"""
        return join(self.output_dir, self.name)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], overrides: Mapping[str, Any] | list[str] | None = None, source: str = ""
    ) -> RunConfig:
        """Build from nested dicts; `overrides` are dotted keys (a dict, or "key=value" strings)."""
        merged = renamed_keys(apply_overrides(dict(data), overrides or {}), source)
        return build(cls, merged, source)

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: Mapping[str, Any] | list[str] | None = None) -> RunConfig:
        """Load a YAML file; relative paths inside it stay relative to the working directory."""
        data = load_yaml(Path(path).read_text(encoding="utf-8"), str(path)) or {}
        if not isinstance(data, dict):
            raise ConfigError([f"the top level must be a mapping, got {type(data).__name__}"], str(path))
        return cls.from_dict(data, overrides, source=str(path))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_yaml(self, path: str | Path | None = None) -> str:
        text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    def replace(self, overrides: Mapping[str, Any] | list[str]) -> RunConfig:
        """A copy with dotted overrides applied (validated like a file)."""
        return RunConfig.from_dict(self.to_dict(), overrides)


DEFAULTS = RunConfig(name="defaults")
"""every setting's default, written once above: the internal records that mirror config fields
(train/update.py's UpdateSettings, train/trainable.py's TrainingSetup, algo/registry.py's LossArgs,
train/schedule.py's LRSchedule) take theirs from here (tests/test_one_default.py)"""


SHORTHANDS = {"model": "model.name", "engine": "model.engine"}
"""override keys that stand for a longer path when given a plain value: `model=Qwen/Qwen3-4B engine=vllm`"""


def apply_overrides(data: dict[str, Any], overrides: Mapping[str, Any] | list[str]) -> dict[str, Any]:
    """Set dotted keys (`grpo.lr`) in nested dicts; string values are parsed as YAML scalars.

    >>> apply_overrides({"grpo": {"lr": 0.1}}, ["grpo.lr=0.5", "model=Qwen/Qwen3-4B", "engine=vllm"])
    {'grpo': {'lr': 0.5}, 'model': {'name': 'Qwen/Qwen3-4B', 'engine': 'vllm'}}
    """
    pairs = _override_pairs(overrides)
    for dotted, value in pairs:
        if dotted in SHORTHANDS and not isinstance(value, Mapping):
            dotted = SHORTHANDS[dotted]
        node = data
        *parents, leaf = dotted.split(".")
        for part in parents:
            child = node.get(part)
            node[part] = dict(child) if isinstance(child, Mapping) else {}
            node = node[part]
        node[leaf] = value
    return data


RENAMED = {("grpo", "is_level"): "importance_level", ("grpo", "is_mode"): "importance_cap_mode"}
"""old keys still read, with a deprecation message: (section, old name) -> new name"""


def renamed_keys(data: dict[str, Any], source: str = "") -> dict[str, Any]:
    """`data` with each old key of RENAMED under its new name, warning once per key; both at once is
    a ConfigError (which one was meant is unclear).

    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     renamed_keys({"grpo": {"is_level": "sequence"}})
    {'grpo': {'importance_level': 'sequence'}}
    """
    for (section, old), new in RENAMED.items():
        part = data.get(section)
        if not isinstance(part, Mapping) or old not in part:
            continue
        if new in part:
            raise ConfigError([f"{section}.{old} is the old name of {section}.{new}: give only {section}.{new}"], source)
        warnings.warn(f"{section}.{old} is deprecated: write {section}.{new} (same values)", FutureWarning, stacklevel=3)
        data[section] = {(new if key == old else key): value for key, value in part.items()}
    return data


def _override_pairs(overrides: Mapping[str, Any] | list[str]) -> list[tuple[str, Any]]:
    if isinstance(overrides, Mapping):
        return list(overrides.items())
    pairs = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError([f"override {item!r} must look like key.path=value (e.g. grpo.lr=1e-6)"])
        pairs.append((key.strip(), load_yaml(raw, f"override {item!r}") if raw.strip() else ""))
    return pairs


# ---------------------------------------------------------------------- the paths a config names

PATH_KEYS = (
    "output_dir", "model.name", "tools.config", "rollout.program", "rollout.env", "reward.function", "reward.judge.model", "distill.teacher",
    "data.train", "data.eval", "sft.data",
)
"""the keys whose value may name a local file or folder, in `config_paths`' order (tests/test_config_paths.py
fails when a RunConfig field is added without saying whether it belongs here)"""


@dataclass(frozen=True)
class ConfigPath:
    """One key of a RunConfig whose value names a local path."""

    key: str
    """the dotted config key, as overrides spell it"""
    path: Path
    """the path as the config writes it (a relative one is relative to the working directory)"""
    kind: Literal["input", "output", "model"]
    """"input": a file or folder the run reads (the tools file, a `file.py:function` reward, a dataset);
    "output": the folder it writes (output_dir); "model": model.name or reward.judge.model, a folder
    only when one is there (else a preset name or a hub id)"""
    suffix: str = ""
    """what follows the path in the value (a reward's `:function`), kept when the path is rewritten"""

    def value(self, path: str | Path) -> str:
        """The key's value with `path` in place of this one (for `cfg.replace({key: ...})`)."""
        return f"{path}{self.suffix}"


def config_paths(cfg: RunConfig) -> list[ConfigPath]:
    """Every key of `cfg` whose value names a local path: the one list that `rf.example` (resolving),
    `launch` (making them absolute) and cluster/shipping.py (shipping) read. Values that name none are
    left out: no tools file, a `module:function` reward, a `synthetic:` dataset.

    >>> cfg = RunConfig(name="x", reward=RewardConfig(function="my/reward.py:score"))
    >>> [(p.key, str(p.path), p.kind, p.suffix) for p in config_paths(cfg)][:3]
    [('output_dir', 'runs', 'output', ''), ('model.name', 'tiny-calculator', 'model', ''), ('reward.function', 'my/reward.py', 'input', ':score')]
    """
    found = [ConfigPath(key, Path(value), kind) for key, value, kind in (("output_dir", cfg.output_dir, "output"), ("model.name", cfg.model.name, "model")) if not is_uri(value)]
    if cfg.tools.config is not None:
        found.append(ConfigPath("tools.config", Path(cfg.tools.config), "input"))
    for key, spec in (("rollout.program", cfg.rollout.program), ("rollout.env", cfg.rollout.env), ("reward.function", cfg.reward.function)):
        module, _, function = (spec or "").rpartition(":")
        if module.endswith(".py"):  # `file.py:function`; a `module:function` names no path
            found.append(ConfigPath(key, Path(module), "input", f":{function}"))
    if cfg.reward.judge is not None and not is_uri(cfg.reward.judge.model):
        found.append(ConfigPath("reward.judge.model", Path(cfg.reward.judge.model), "model"))
    if cfg.distill is not None and not is_uri(cfg.distill.teacher):
        found.append(ConfigPath("distill.teacher", Path(cfg.distill.teacher), "model"))
    for key in ("train", "eval"):
        source = getattr(cfg.data, key)
        if not source.startswith("synthetic:"):
            found.append(ConfigPath(f"data.{key}", Path(source), "input"))
    if cfg.sft.data is not None and not is_uri(cfg.sft.data):
        found.append(ConfigPath("sft.data", Path(cfg.sft.data), "input"))
    return found
