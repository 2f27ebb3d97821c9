"""`config_paths`: the one list of a RunConfig's path-valued keys, pinned against its fields."""

import dataclasses
import typing
from pathlib import Path

from rlfactory_nb.config import PATH_KEYS, RunConfig, config_paths
from rlfactory_nb.config_distill import DistillConfig
from rlfactory_nb.config_sections import JudgeConfig, RewardConfig, ToolsConfig

NOT_PATHS = {
    "name", "wandb_project", "samples_per_step",
    "model.engine", "model.dtype", "model.master_dtype", "model.gradient_checkpointing", "model.lora",
    "model.device", "model.engine_args", "model.trust_remote_code",
    "tools.timeout_s", "tools.max_concurrency", "tools.max_result_chars", "tools.cache",
    "rollout.chat_format", "rollout.parser", "rollout.max_turns", "rollout.max_new_tokens", "rollout.max_total_tokens",
    "rollout.temperature", "rollout.top_p", "rollout.max_in_flight", "rollout.drift_check", "rollout.enable_thinking",
    "rollout.env_timeout_s", "rollout.max_open_envs", "rollout.env_seed", "rollout.env_reward",
    "rollout.env_error_reward",
    "reward.args", "reward.on_error", "reward.max_concurrency", "reward.timeout_s",
    "reward.judge.engine", "reward.judge.num_gpus", "reward.judge.num_cpus", "reward.judge.engine_args",
    "reward.judge.use", "reward.judge.max_tokens", "reward.judge.max_concurrency", "reward.judge.timeout_s",
    "cluster.address", "cluster.num_workers", "cluster.num_engines", "cluster.cpus_per_worker",
    "cluster.gpus_per_worker", "cluster.num_gpus", "cluster.colocate", "cluster.strategy", "cluster.weight_sync",
    "cluster.object_store_memory_gb", "cluster.backend", "cluster.driver_resources", "cluster.worker_resources",
    "cluster.engine_resources",
    "distill.coef", "distill.only", "distill.engine", "distill.num_gpus", "distill.num_cpus", "distill.engine_args",
    "distill.max_concurrency",
    "data.eval_size", "kernel_objects",
    "sft.min_reward", "sft.steps", "sft.batch_size", "sft.lr", "sft.lr_schedule", "sft.warmup_steps",
    "sft.checkpoint_every", "sft.seed", "sft.rounds", "sft.samples_per_prompt", "sft.prompts_per_round",
}  # fmt: skip
"""every other leaf key: none names a file or folder (reward.args may, but it is the factory's business)"""

SECTIONS_WITHOUT_PATHS = {"grpo"}
"""sections checked as a whole: the algorithm's settings name no files"""

OPTIONAL_SECTIONS = {"reward.judge", "distill"}
"""optional records whose keys are classified one by one (reward.judge.model names a model as model.name
does); other optional records (model.lora) are one value"""


def leaf_keys(cls: type, prefix: str = "") -> set[str]:
    """The dotted keys of a config dataclass, nested config sections walked (not optional records
    such as model.lora, which are values of one key)."""
    keys = set()
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        kind = hints[field.name]
        key = f"{prefix}{field.name}"
        if key in OPTIONAL_SECTIONS:
            (kind,) = [part for part in typing.get_args(kind) if dataclasses.is_dataclass(part)]
            keys |= leaf_keys(kind, f"{key}.")
        elif dataclasses.is_dataclass(kind) and field.default is dataclasses.MISSING:
            if field.name not in SECTIONS_WITHOUT_PATHS:
                keys |= leaf_keys(kind, f"{key}.")
        else:
            keys.add(key)
    return keys


def test_every_config_field_is_said_to_hold_a_path_or_not():
    """A new RunConfig field fails here until it is added to config.PATH_KEYS (and `config_paths`)
    or to NOT_PATHS above."""
    keys = leaf_keys(RunConfig)
    unsorted = keys - set(PATH_KEYS) - NOT_PATHS
    assert not unsorted, f"say whether these hold a path (config.PATH_KEYS) or not (NOT_PATHS here): {sorted(unsorted)}"
    assert not (set(PATH_KEYS) | NOT_PATHS) - keys, "keys listed here that RunConfig no longer has"


def test_config_paths_lists_every_path_key_that_names_a_path():
    cfg = RunConfig(
        name="x",
        tools=ToolsConfig(config="tools.yaml"),
        reward=RewardConfig(function="rewards/mine.py:score", judge=JudgeConfig(model="judges/qwq")),
        distill=DistillConfig(teacher="teachers/calc"),
    ).replace({"data.train": "data/train.jsonl", "data.eval": "data/eval.parquet", "rollout.program": "agents/mine.py:solve",
               "rollout.env": "envs/shop.py:Shop", "sft.data": "runs/expert"})
    found = config_paths(cfg)
    assert tuple(named.key for named in found) == PATH_KEYS
    by_key = {named.key: named for named in found}
    assert by_key["reward.function"].path == Path("rewards/mine.py") and by_key["reward.function"].suffix == ":score"
    assert by_key["reward.function"].value("/abs/mine.py") == "/abs/mine.py:score"
    assert {named.kind for named in found} == {"input", "output", "model"}
    assert by_key["output_dir"].kind == "output" and by_key["model.name"].kind == "model"
    assert by_key["reward.judge.model"].kind == "model" and by_key["reward.judge.model"].path == Path("judges/qwq")
    assert by_key["distill.teacher"].kind == "model" and by_key["distill.teacher"].path == Path("teachers/calc")


def test_values_that_name_no_path_are_left_out():
    keys = [named.key for named in config_paths(RunConfig(name="x"))]  # no tools, a module reward, synthetic data
    assert keys == ["output_dir", "model.name"]
