"""Supervised fine-tuning on the tiny embedded model (tiny-calculator), on each kind of data: the NLL
of the same rows falls over a few steps, through the shared update (train/sft.py); rejection
sampling keeps only samples scoring at least the threshold under a real reward; resume and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import rlfactory_nb as rf
from rlfactory_nb.cli import main
from rlfactory_nb.errors import DatasetError, RunFolderExistsError
from rlfactory_nb.models.presets import calculator
from rlfactory_nb.runtime import Runtime
from rlfactory_nb.train.run_folder import RunFolder, read_metrics
from rlfactory_nb.train.sft_data import sft_trajectories
from rlfactory_nb.types import save_jsonl

ROWS = 4


def conversation(question: calculator.Question) -> dict:
    """An OpenAI chat-format row: a call with a JSON-string argument, its result, an answer worded
    as the preset never saw it (so there is something left to learn)."""
    call = {
        "type": "function",
        "function": {"name": "calculator", "arguments": json.dumps({"expression": question.expression})},
    }
    return {
        "messages": [
            *question.messages(),
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": str(question.answer)},
            {
                "role": "assistant",
                "content": f"The calculator says {question.answer}, so that is the answer.",
            },
        ],
        "tools": [calculator.CALCULATOR_TOOL],
        "ground_truth": str(question.answer),
    }


def rows(n: int = ROWS, seed: int = 7) -> list[dict]:
    return [conversation(question) for question in calculator.questions(n, seed)]


def config(tmp_path: Path, name: str = "sft", **sft) -> rf.RunConfig:
    """Every step trains on all the rows, so step 1's loss is the NLL before any update and the last
    step's the NLL of the same rows after the others."""
    values = {"steps": 4, "batch_size": ROWS, "lr": 3e-3, **sft}
    return rf.RunConfig.from_yaml(
        "examples/calculator/config.yaml",
        {"name": name, "output_dir": str(tmp_path / "runs"), "model.device": "cpu", "grpo.micro_batch_size": 2,
         **{f"sft.{key}": value for key, value in values.items()}},
    )  # fmt: skip


def losses(run_dir: Path) -> list[float]:
    return [row["sft/loss"] for row in read_metrics(run_dir)]


def assert_learns(result: rf.train.sft.SFTResult, steps: int = 4) -> None:
    curve = losses(result.run_dir)
    assert len(curve) == steps and result.step == steps
    assert curve[-1] < 0.7 * curve[0], f"the NLL of the same rows should fall: {curve}"
    row = read_metrics(result.run_dir)[-1]
    assert row["sft/tokens"] > 0 and "train/loss" not in row and "train/logprob_gap_mean" not in row
    assert result.checkpoint is not None and (Path(result.checkpoint) / "trainer_state.pt").exists()


def test_conversation_rows_train(tmp_path) -> None:
    """Measured: NLL 6.32 -> 3.05 over 4 steps at lr 3e-3 (2 cores, about 6 s)."""
    result = rf.sft_sync(config(tmp_path), data=rows())
    assert_learns(result)
    assert read_metrics(result.run_dir)[0]["sft/rows"] == ROWS


def test_conversation_rows_from_a_file_train(tmp_path) -> None:
    path = tmp_path / "conversations.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows()))
    assert_learns(rf.sft_sync(config(tmp_path, data=str(path))))


def test_trajectories_train_and_are_kept_by_reward(tmp_path) -> None:
    """Trajectory objects (here: the conversations' own) with a reward each; only those at the
    threshold or above train."""
    policy = rf.Policy.load("tiny-calculator", device="cpu")
    data = sft_trajectories(rows(2 * ROWS), policy.tokenizer).trajectories
    for index, traj in enumerate(data):
        traj.metadata["reward"] = float(index % 2)
    kept = sft_trajectories(data, policy.tokenizer, min_reward=1.0)
    assert len(kept.trajectories) == ROWS and kept.below_threshold == ROWS
    assert all(traj.metadata["reward"] == 1.0 for traj in kept.trajectories)
    assert_learns(rf.sft_sync(config(tmp_path, min_reward=1.0), data=data, policy=policy))


def test_a_run_folders_trajectories_train_with_the_same_filter(tmp_path) -> None:
    policy = rf.Policy.load("tiny-calculator", device="cpu")
    trajectories = sft_trajectories(rows(2 * ROWS), policy.tokenizer).trajectories
    for index, traj in enumerate(trajectories):
        traj.metadata["reward"] = 1.0 if index < ROWS else 0.0
    folder = tmp_path / "runs" / "grpo-run"
    RunFolder(folder).write_trajectories(1, trajectories[:3])
    RunFolder(folder).write_trajectories(2, trajectories[3:])
    kept = sft_trajectories(folder, policy.tokenizer, min_reward=0.5)
    assert [traj.prompt_ids + traj.response_ids for traj in kept.trajectories] == [
        traj.prompt_ids + traj.response_ids for traj in trajectories[:ROWS]
    ]
    assert_learns(rf.sft_sync(config(tmp_path, data=str(folder), min_reward=0.5), policy=policy))
    save_jsonl(trajectories, tmp_path / "trajectories.jsonl")
    from_file = sft_trajectories(tmp_path / "trajectories.jsonl", policy.tokenizer, min_reward=0.5)
    assert len(from_file.trajectories) == ROWS


def test_nothing_kept_is_an_error_that_says_why(tmp_path) -> None:
    policy = rf.Policy.load("tiny-calculator", device="cpu")
    with pytest.raises(
        DatasetError,
        match="no trajectory to fine-tune on scoring at least sft.min_reward=2.0: 4 read, 4 below",
    ):
        sft_trajectories([{**row, "reward": 1.0} for row in rows()], policy.tokenizer, min_reward=2.0)


def test_resume_continues_the_steps_once_and_a_new_run_refuses_the_folder(tmp_path) -> None:
    first = rf.sft_sync(config(tmp_path, steps=2), data=rows())
    assert first.step == 2
    with pytest.raises(RunFolderExistsError):
        rf.sft_sync(config(tmp_path, steps=2), data=rows())
    resumed = rf.sft_sync(config(tmp_path, steps=4, checkpoint_every=1), data=rows(), resume=True)
    assert resumed.step == 4 and [row["step"] for row in read_metrics(resumed.run_dir)] == [1, 2, 3, 4]


@pytest.mark.slow
def test_rejection_sampling_keeps_only_samples_at_the_threshold(tmp_path) -> None:
    """exact_match on the synthetic calculator task: every kept sample scored 1, the rest 0, and each
    round's samples are saved with their rewards."""
    cfg = config(tmp_path, name="rs", steps=2, batch_size=8, prompts_per_round=6, lr=1e-3)
    result = rf.rejection_sampling_sync(cfg, rounds=2, k=4, min_reward=1.0)
    folder = RunFolder(result.run_dir)
    assert folder.trajectory_steps() == [1, 3]
    for step, summary in zip(folder.trajectory_steps(), result.rounds):
        saved = folder.load_trajectories(step)
        scores = [traj.metadata["reward"] for traj in saved]
        assert len(saved) == summary["rejection/sampled"] == 24 and set(scores) <= {0.0, 1.0}
        assert summary["rejection/kept"] == scores.count(1.0) > 0
    rows_written = read_metrics(result.run_dir)
    assert [row["step"] for row in rows_written] == [1, 2, 3, 4]
    assert [row["rejection/round"] for row in rows_written] == [1, 1, 2, 2]


def test_the_cli_fine_tunes_on_a_file(tmp_path, capsys) -> None:
    path = tmp_path / "conversations.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows()))
    overrides = [f"output_dir={tmp_path / 'runs'}", "name=cli", "model.device=cpu", f"sft.data={path}",
                 "sft.steps=2", f"sft.batch_size={ROWS}"]  # fmt: skip
    assert main(["sft", "examples/calculator/config.yaml", *overrides]) == 0
    assert "finished step 2" in capsys.readouterr().out
    assert len(losses(tmp_path / "runs" / "cli")) == 2


def test_lora_adapters_train_and_the_checkpoint_is_an_adapter(tmp_path) -> None:
    """Adapters start at zero, so step 1's NLL is the base model's (6.32 here); 6 steps at 2e-2: 3.03."""
    cfg = config(tmp_path, name="lora", lr=2e-2, steps=6).replace({"model.lora": {"rank": 8, "alpha": 16}})
    result = rf.sft_sync(cfg, data=rows())
    assert_learns(result, steps=6)
    assert (Path(result.checkpoint) / "adapter_config.json").exists()


async def test_a_reward_labs_samples_train_kept_by_its_score(tmp_path) -> None:
    """A RewardLab on the preset with exact_match: only the samples it scored at the threshold train."""
    cfg = config(tmp_path, name="lab", batch_size=4, steps=2)
    policy = rf.Policy.load("tiny-calculator", device="cpu")
    runtime = await Runtime.from_config(cfg, policy=policy).start()
    try:
        lab = runtime.reward_lab(calculator.dataset("train", 6), group_size=4)
        await lab.sample(n_prompts=6)
    finally:
        await runtime.close()
    scores = lab.scores().flatten().tolist()
    kept = sft_trajectories(lab, policy.tokenizer, min_reward=1.0)
    assert 0 < len(kept.trajectories) == scores.count(1.0) < len(scores)
    assert kept.below_threshold == len(scores) - scores.count(1.0)
    result = await rf.sft(cfg.replace({"sft.min_reward": 1.0}), data=lab, policy=policy)
    assert result.step == 2 and read_metrics(result.run_dir)[0]["sft/rows"] == len(kept.trajectories)
