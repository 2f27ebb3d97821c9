"""Everything a run names is resolved before any work: each mistake below fails `train_sync` and
`launch` within 2 s, naming the key and the closest valid name, with no model loaded and no Ray."""

import time

import pytest

import rlfactory_nb as rf
from rlfactory_nb.cluster import launcher
from rlfactory_nb.config import RunConfig
from rlfactory_nb.errors import ConfigError, DatasetError, RewardLoadError, RLFactoryError
from rlfactory_nb.models.policy import Policy
from rlfactory_nb.runtime import check_names

JUDGE = {"model": "tiny-calculator"}
MISTAKES = {
    "loss": ({"grpo.loss": "grpoo"}, ConfigError, "grpo.loss: unknown name 'grpoo' (did you mean 'grpo'?)"),
    "loss module": ({"grpo.loss": "no_such_module:loss"}, ConfigError, "grpo.loss: policy loss 'no_such_module:loss'"),
    "parser": ({"rollout.parser": "hermess"}, ConfigError, "rollout.parser: unknown name 'hermess' (did you mean 'hermes'?)"),
    "chat format": ({"rollout.chat_format": "qwen_3"}, ConfigError, "rollout.chat_format: unknown name 'qwen_3' (did you mean 'qwen3'?)"),
    "engine kind": ({"model.engine": "vlm"}, ConfigError, "model.engine: unknown name 'vlm' (did you mean 'vllm'?)"),
    "judge engine": ({"reward.judge": {**JUDGE, "engine": "hff"}}, ConfigError, "reward.judge.engine: unknown name 'hff' (did you mean 'hf'?)"),
    "teacher engine": ({"distill": {"teacher": "tiny-guess", "engine": "vlm"}}, ConfigError, "distill.engine: unknown name 'vlm' (did you mean 'vllm'?)"),
    "distillation alone": (
        {"distill": {"teacher": "tiny-guess", "only": True}}, ConfigError,
        "distill.only: the run trains on the teacher's KL alone, but grpo.filter_zero_variance drops",
    ),
    "reward module": ({"reward.function": "no_such_rewards:score"}, RewardLoadError, "reward spec 'no_such_rewards:score': cannot import"),
    "reward name": ({"reward.function": "rlfactory_nb.rewards.functions:exact_mach"}, RewardLoadError, "has no 'exact_mach'"),
    "reward file": ({"reward.function": "missing/reward.py:score"}, RewardLoadError, "reward spec 'missing/reward.py:score': no file"),
    "dataset": ({"data.train": "missing/train.jsonl"}, DatasetError, "missing/train.jsonl"),
    "eval dataset": ({"data.eval": "synthetic:calculater"}, DatasetError, "unknown synthetic dataset 'synthetic:calculater'"),
}


@pytest.fixture
def nothing_starts(monkeypatch):
    """A model load or a Ray start fails the test: the mistake must be caught before either."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model loaded or Ray started before the config's names were resolved")

    monkeypatch.setattr(Policy, "load", refuse)
    monkeypatch.setattr(launcher.Cluster, "connect", refuse)


@pytest.mark.parametrize("mistake", list(MISTAKES))
@pytest.mark.parametrize("entry", ["train_sync", "launch"])
def test_each_mistake_fails_at_once_naming_the_key(mistake, entry, nothing_starts, tmp_path):
    overrides, error, message = MISTAKES[mistake]
    cfg = RunConfig.from_dict({"name": "names", "output_dir": str(tmp_path)}, overrides=overrides)
    start = time.perf_counter()
    with pytest.raises(error) as raised:
        rf.train_sync(cfg) if entry == "train_sync" else rf.launch(cfg)
    assert time.perf_counter() - start < 2.0
    assert message in str(raised.value) and isinstance(raised.value, RLFactoryError)
    assert not (tmp_path / "names").exists()  # nothing written either


def test_every_problem_is_listed_at_once_and_a_good_config_passes():
    cfg = RunConfig.from_dict({"name": "x"}, overrides={"grpo.loss": "grpoo", "model.engine": "vlm"})
    with pytest.raises(ConfigError) as raised:
        check_names(cfg)
    assert [p.split(":")[0] for p in raised.value.problems] == ["grpo.loss", "model.engine"]
    check_names(RunConfig(name="x"))
    check_names(RunConfig.from_dict({"name": "x", "grpo": {"loss": "rlfactory_nb.algo.losses:grpo_loss"}}))


def test_a_loss_module_that_is_not_there_is_listed_with_the_other_problems():
    cfg = RunConfig.from_dict({"name": "x"}, overrides={"grpo.loss": "no_such_module:loss", "model.engine": "vlm"})
    with pytest.raises(ConfigError) as raised:
        check_names(cfg)
    assert [p.split(":")[0] for p in raised.value.problems] == ["grpo.loss", "model.engine"]
    assert "cannot import module 'no_such_module'" in raised.value.problems[0]


def test_objects_from_the_kernel_replace_what_the_config_names():
    cfg = RunConfig.from_dict({"name": "x", "reward": {"function": "no_such:f"}, "data": {"train": "missing.jsonl"}})
    check_names(cfg, rf.data.objects.RunObjects.of(lambda sample: 1.0, None, [{"messages": [{"role": "user", "content": "1+1?"}], "ground_truth": "2"}]))


def test_a_reward_spec_must_name_a_module_and_a_function():
    for spec in ("exact_match", "", "module:", ":name"):
        with pytest.raises(ConfigError, match="reward.function: must look like 'package.module:name'"):
            RunConfig.from_dict({"name": "x", "reward": {"function": spec}})
