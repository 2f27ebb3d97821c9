"""Run configs: YAML + dotted overrides, one error naming every bad key, round trips."""

from pathlib import Path

import pytest

from rlfactory_nb.config import ConfigError, RunConfig
from rlfactory_nb.config_grpo import GRPOConfig

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "calculator" / "config.yaml"


def test_example_loads_and_overrides_apply():
    cfg = RunConfig.from_yaml(
        EXAMPLE, overrides=["grpo.lr=1e-6", "rollout.max_turns=2", "cluster.address=auto"]
    )
    assert cfg.grpo.lr == 1e-6 and cfg.rollout.max_turns == 2 and cfg.cluster.address == "auto"
    assert cfg.grpo.group_size == 8  # untouched values keep the file's
    assert cfg.run_dir == Path("runs/tiny-calculator")


def test_papermill_parameters_as_dotted_dict():
    cfg = RunConfig.from_dict({"name": "nb"}, overrides={"grpo.steps": 3, "model.engine": "vllm"})
    assert cfg.grpo.steps == 3 and cfg.model.engine == "vllm"


def test_yaml_round_trip(tmp_path):
    cfg = RunConfig.from_yaml(EXAMPLE)
    cfg.to_yaml(tmp_path / "again.yaml")
    assert RunConfig.from_yaml(tmp_path / "again.yaml") == cfg


def test_typo_names_the_key_path_and_the_closest_valid_key():
    with pytest.raises(ConfigError) as raised:
        RunConfig.from_dict({"name": "x", "grpo": {"learning_rate": 1e-6, "group_sise": 4}})
    message = str(raised.value)
    assert "grpo.group_sise: unknown key; did you mean 'grpo.group_size'?" in message
    assert "grpo.learning_rate: unknown key" in message  # no close match: lists the valid keys
    assert "lr" in message


def test_wrong_type_and_bad_choice_and_missing_field_are_all_reported_at_once():
    with pytest.raises(ConfigError) as raised:
        RunConfig.from_dict({"grpo": {"steps": "many", "loss": "grpo", "importance_cap_mode": "truncated"}})
    problems = raised.value.problems
    assert any(p.startswith("grpo.steps: expected int") for p in problems)
    assert any(
        p.startswith("grpo.importance_cap_mode: 'truncated' is not one of") and "did you mean 'truncate'" in p for p in problems
    )
    assert "name: required field is missing" in problems
    assert len(problems) == 3


def test_numbers_written_as_yaml_strings_are_accepted_but_booleans_are_not_numbers():
    assert RunConfig.from_dict({"name": "x"}, overrides=["grpo.lr=3e-4"]).grpo.lr == 3e-4
    assert RunConfig.from_dict({"name": "x", "grpo": {"lr": "1e-6"}}).grpo.lr == 1e-6
    with pytest.raises(ConfigError, match="grpo.steps: expected int"):
        RunConfig.from_dict({"name": "x", "grpo": {"steps": True}})


def test_malformed_override_explains_the_syntax():
    with pytest.raises(ConfigError, match=r"key.path=value"):
        RunConfig.from_dict({"name": "x"}, overrides=["grpo.lr"])


def test_configs_are_frozen():
    with pytest.raises(AttributeError):
        GRPOConfig().lr = 1.0  # type: ignore[misc]


def test_documented_multi_gpu_command_resolves_to_four_workers_and_four_vllm_engines(capsys):
    from rlfactory_nb.cli.train import main

    overrides = ["cluster.num_gpus=8", "engine=vllm", "model=Qwen/Qwen3-4B", "cluster.strategy=fsdp"]
    assert main(["train", str(EXAMPLE), *overrides, "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "name: Qwen/Qwen3-4B" in printed and "engine: vllm" in printed
    assert "4 policy worker(s) (fsdp), 4 vllm engine(s), 1 GPU each" in printed
    cfg = RunConfig.from_yaml(EXAMPLE, overrides=overrides)
    assert cfg.cluster.layout().num_workers + cfg.cluster.layout().num_engines == 8
    one = cfg.replace(["cluster.num_gpus=1"]).cluster.layout()
    assert (one.num_workers, one.num_engines, one.gpus_per_worker, one.colocate) == (1, 1, 0.5, True)
