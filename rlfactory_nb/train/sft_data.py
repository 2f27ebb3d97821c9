"""What supervised fine-tuning trains on, turned into trajectories: the rows GRPO trains.

`sft_trajectories(data, tokenizer, ...)` takes any of

    rf.Trajectory objects       their own ids and mask, as sampled (a RewardLab's, a run's, yours)
    a RewardLab                 its sampled trajectories, scored by its first reward
    conversation rows           dicts with `messages` (OpenAI chat format: assistant `tool_calls`,
                                `tool` results) and `tools`, rendered with the model family's format
                                (rollout/conversation.py); or a datasets.Dataset of them
    a run folder                every trajectory the run saved (trajectories/step_*.jsonl)
    a file                      a JSONL of trajectories (`save_jsonl`), or of conversation rows
                                (.jsonl, .json, .parquet, a save_to_disk folder: data/rows.py)

and keeps those scoring at least `min_reward` (a trajectory's `metadata["reward"]`, a row's `reward`
column; with a threshold, one without a score is left out). Each kept trajectory trains its loss-mask
tokens, so the SFT batch (`sft_batch`) is exactly GRPO's batch of it, with no advantage to read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rlfactory_nb.chat import ChatFormat
from rlfactory_nb.data.rows import load_rows, read_records
from rlfactory_nb.errors import DatasetError
from rlfactory_nb.rollout.conversation import conversation_trajectory
from rlfactory_nb.train.batch import TrainBatch, build_batch
from rlfactory_nb.train.run_folder import TRAJECTORIES, RunFolder
from rlfactory_nb.types import Trajectory, load_jsonl


@dataclass
class SFTData:
    """The trajectories kept for training, and what was left out and why."""

    trajectories: list[Trajectory]
    seen: int = 0
    """items read (trajectories and rows)"""
    below_threshold: int = 0
    """left out for scoring under `min_reward` (or having no score when one is set)"""
    nothing_to_train: int = 0
    """left out for having no trained token (no assistant turn, or an empty loss mask)"""
    sources: list[str] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        return {
            "sft/rows": float(len(self.trajectories)),
            "sft/rows_seen": float(self.seen),
            "sft/rows_below_threshold": float(self.below_threshold),
        }


def sft_batch(trajectories: Sequence[Trajectory], pad_id: int) -> TrainBatch:
    """GRPO's batch of `trajectories` (`build_batch`); the SFT loss reads no advantage, so it is 0."""
    return build_batch(trajectories, torch.zeros(len(trajectories)), pad_id)


def sft_trajectories(
    data: Any,
    tokenizer: Any,
    min_reward: float | None = None,
    chat_format: str | ChatFormat = "auto",
    enable_thinking: bool = False,
) -> SFTData:
    """The trajectories `data` holds (module docstring), filtered by `min_reward`."""
    kept = SFTData([])
    for traj, reward in _scored(data, tokenizer, chat_format, enable_thinking):
        kept.seen += 1
        if min_reward is not None and (reward is None or reward < min_reward):
            kept.below_threshold += 1
        elif not any(traj.loss_mask):
            kept.nothing_to_train += 1
        else:
            kept.trajectories.append(traj)
    if not kept.trajectories:
        threshold = f" scoring at least sft.min_reward={min_reward}" if min_reward is not None else ""
        raise DatasetError(
            f"no trajectory to fine-tune on{threshold}: {kept.seen} read, {kept.below_threshold} below the "
            f"threshold, {kept.nothing_to_train} with no assistant token"
        )
    return kept


def _scored(
    data: Any, tokenizer: Any, chat_format: str | ChatFormat, thinking: bool
) -> Iterable[tuple[Trajectory, float | None]]:
    if isinstance(data, (str, Path)):
        yield from _from_path(Path(data), tokenizer, chat_format, thinking)
    elif hasattr(data, "groups") and hasattr(data, "outcomes"):  # a RewardLab, after `sample`
        for group, outcomes in zip(data.groups or [], getattr(data, "outcomes", None) or []):
            for traj, outcome in zip(group, outcomes):
                yield traj, outcome.score
    elif isinstance(data, Trajectory):
        yield data, _reward(data)
    else:
        items = data.to_list() if hasattr(data, "to_list") and hasattr(data, "column_names") else data
        if not isinstance(items, Iterable) or isinstance(items, dict):
            raise DatasetError(
                f"SFT data is a {type(data).__name__}: pass trajectories, conversation rows (dicts with "
                "'messages'), a datasets.Dataset, a RewardLab, a run folder or a file"
            )
        for number, item in enumerate(items, start=1):
            yield _item(item, f"SFT data item {number}", tokenizer, chat_format, thinking)


def _item(
    item: Any, where: str, tokenizer: Any, chat_format: str | ChatFormat, thinking: bool
) -> tuple[Trajectory, float | None]:
    if isinstance(item, Trajectory):
        return item, _reward(item)
    if isinstance(item, dict) and "prompt_ids" in item:
        traj = Trajectory.from_dict(item)
        return traj, _reward(traj)
    if isinstance(item, dict) and "messages" in item:
        tools = item.get("tools")
        tools = json.loads(tools) if isinstance(tools, str) else tools
        try:
            traj = conversation_trajectory(tokenizer, item["messages"], tools or None, chat_format, thinking)
        except DatasetError as error:
            raise DatasetError(f"{where}: {error}") from None
        reward = item.get("reward")
        traj.metadata["reward"] = reward
        return traj, float(reward) if reward is not None else None
    raise DatasetError(f"{where} is a {type(item).__name__}: expected a Trajectory or a dict with 'messages'")


def _from_path(
    path: Path, tokenizer: Any, chat_format: str | ChatFormat, thinking: bool
) -> Iterable[tuple[Trajectory, float | None]]:
    folder = RunFolder(path)
    if path.is_dir() and (path / TRAJECTORIES).is_dir():
        steps = folder.trajectory_steps()
        if not steps:
            raise DatasetError(
                f"the run folder {path} has saved no trajectories (grpo.trajectories_per_step: 0?)"
            )
        for step in steps:
            for traj in folder.load_trajectories(step):
                yield traj, _reward(traj)
        return
    first = read_records(path, limit=1) if path.is_file() else []
    if first and isinstance(first[0][1], dict) and "prompt_ids" in first[0][1]:
        for traj in load_jsonl(path):
            yield traj, _reward(traj)
        return
    for number, row in enumerate(load_rows(str(path), what=str(path)), start=1):
        yield _item(row, f"{path} row {number}", tokenizer, chat_format, thinking)


def _reward(traj: Trajectory) -> float | None:
    reward = traj.metadata.get("reward")
    return float(reward) if isinstance(reward, (int, float)) else None
