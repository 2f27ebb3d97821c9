"""Objects from the kernel in training: a reward function, @rf.tool functions and rows go to
`train` instead of what the config names, are kept in runs/<name>/code/, and a resume without them
uses the kept ones. What cannot travel fails before anything starts, naming it. A tools file's
settings hold in the trainer's rollouts unless the run config sets them."""

import threading
from pathlib import Path

import pytest

import rlfactory_nb as rf
from rlfactory_nb.data.objects import ObjectTransferError, RunObjects
from rlfactory_nb.data.rows import DatasetError
from rlfactory_nb.rewards.loading import load_reward
from rlfactory_nb.train.loop import Trainer, train
from rlfactory_nb.train.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[2]
ROWS = [{"prompt": f"What is {i}+{i}?", "ground_truth": str(2 * i)} for i in range(6)]


def quarter(sample: rf.Sample) -> float:
    """Defined in a test module, as a user's own module: it travels by value."""
    return 0.25


@rf.tool
def long_text(n: int) -> str:
    """n letters.

    Args:
        n: how many
    """
    return "x" * n


async def test_objects_train_are_kept_in_the_run_folder_and_a_resume_uses_them(make_cfg):
    cfg = make_cfg(grpo__steps=1)
    result = await train(cfg, reward={"quarter": quarter}, tools=[long_text], train_data=ROWS)
    assert result.metrics["reward/mean"] == 0.25
    code = cfg.run_dir / "code"
    assert "def quarter" in (code / "reward.py").read_text() and "def long_text" in (code / "tools.py").read_text()
    assert (code / "train_data.jsonl").read_text().count("\n") == len(ROWS)
    kept = RunObjects.load(cfg.run_dir)
    assert kept.train_data[0]["messages"][0]["content"] == "What is 0+0?" and kept.tools.functions[0].target.name == "long_text"
    # A new process would have only the run folder: resume names none of the objects.
    await train(cfg.replace({"grpo.steps": 2}), resume=True)
    assert [row["reward/mean"] for row in read_metrics(cfg.run_dir)] == [0.25, 0.25]


def test_an_unpicklable_reward_fails_naming_it_and_what_it_holds():
    lock = threading.Lock()

    def guarded(sample):
        with lock:
            return 1.0

    with pytest.raises(ObjectTransferError, match=r"reward 'mine' cannot travel.*refers to 'lock' \(a lock\)"):
        RunObjects.of(reward={"mine": guarded}).dumps()


async def test_the_trainer_checks_objects_before_starting(make_cfg, tmp_path):
    with pytest.raises(DatasetError, match="train_data row 1: missing column 'messages'"):
        await train(make_cfg(grpo__steps=1), train_data=[{"question": "?"}])
    with pytest.raises(TypeError, match="reward 'x' is a str"):
        await train(make_cfg(grpo__steps=1), reward={"x": "not a function"})


async def test_a_tools_file_settings_hold_in_training_unless_the_run_config_sets_them(make_cfg):
    tools_file = str(ROOT / "examples/calculator/tools.yaml")  # settings: max_result_chars: 1000
    for overrides, limit in (({}, 1000), ({"tools.max_result_chars": 200}, 200)):
        cfg = make_cfg(grpo__steps=1).replace({"tools.config": tools_file, **overrides})
        trainer = await Trainer(cfg, objects=RunObjects.of(tools=[long_text])).start()
        try:
            assert trainer.agent.tools.settings.max_result_chars == limit
            assert set(trainer.agent.tools.names) == {"calculator", "long_text"}
            result = await trainer.agent.tools.call("long_text", {"n": 5000})
            assert result.content.startswith("x" * limit) and len(result.content) < limit + 100
        finally:
            await trainer.close()


BONUS = 0.5


def answered(sample: rf.Sample) -> float:
    """A helper the lab reward calls: the grader must find it in code/reward.py."""
    return float(bool(sample.final_answer))


def shaped(sample: rf.Sample) -> dict[str, float]:
    return {"score": rf.rewards.exact_match(sample) + BONUS * answered(sample)}


async def test_a_lab_reward_is_what_the_checkpoint_config_and_readable_source_name(make_cfg, tmp_path):
    """Notebook 02 -> 03: a lab reward saved to a file, loaded in 'another kernel', trained with. The
    checkpoint's config names it (not the config's default), and code/reward.py holds it with the
    helper and the value it uses, under their own names; every file says truly where the pickle is."""
    lab = rf.RewardLab(agent=None, dataset=ROWS, rewards={"shaped": shaped, "em": rf.rewards.exact_match})
    saved = lab.save_reward(tmp_path / "lab_reward.pkl", "shaped", "em")
    lab_source = saved.with_suffix(".py").read_text()
    assert "lab_reward.pkl, in this folder" in lab_source and "objects.pkl" not in lab_source
    reward = rf.RewardLab.load_reward(saved)
    cfg = make_cfg(grpo__steps=1)
    assert cfg.reward.function.endswith(":first_token")  # what the config names, and what did not train
    result = await train(cfg, reward=reward, train_data=ROWS)
    recorded = rf.RunConfig.from_yaml(result.checkpoint / "run_config.yaml")
    assert recorded.reward.function == "objects.pkl:shaped"
    assert recorded.data.train == str(cfg.run_dir / "code" / "train_data.jsonl")
    entries = recorded.kernel_objects["reward"]
    assert [(e["name"], e["role"], e["module"]) for e in entries] == [
        ("shaped", "trains", __name__), ("em", "logged", "rlfactory_nb.rewards.functions")]
    source = (cfg.run_dir / "code" / "reward.py").read_text()
    assert "# reward 'shaped', defined in" in source and "# reward 'em'" in source
    assert "def answered(sample" in source and "BONUS = 0.5" in source and "import rlfactory_nb as rf" in source
    assert source.index("def answered") < source.index("def shaped")
    assert "objects.pkl, in this folder" in source and (cfg.run_dir / "code" / "objects.pkl").exists()
    import hashlib

    from rlfactory_nb.data.readable import readable_source

    assert entries[0]["sha256"] == hashlib.sha256(readable_source(reward["shaped"]).encode()).hexdigest()
    with pytest.raises(rf.errors.RewardLoadError, match="came from the kernel"):
        load_reward(recorded.reward.function)
    # Resuming with the recorded config keeps the pickled reward rather than failing on its name.
    await train(recorded.replace({"grpo.steps": 2, "data.train": cfg.data.train}), resume=True)
    assert [row["step"] for row in read_metrics(cfg.run_dir)] == [1, 2]


class Counter:
    """An environment class from the kernel: the record names it as it names a reward."""

    def reset(self, row):
        return row


def test_any_code_an_object_field_holds_is_recorded_and_kept_readable(tmp_path):
    """Fields beyond reward, tools and rows (an environment, an agent program) are recorded too."""
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class WithEnvironment(RunObjects):
        environment: object = None

    objects = WithEnvironment(reward=quarter, environment=Counter)
    record = objects.provenance()
    assert record["environment"]["name"] == "Counter" and record["environment"]["source"] == "code/environment.py"
    assert record["reward"][0]["name"] == "quarter"
    folder = objects.save(tmp_path)
    assert "class Counter" in (folder / "environment.py").read_text()
