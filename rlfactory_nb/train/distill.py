"""On-policy distillation in a training step: the teacher scores the student's rows, the reverse KL
joins the advantages (`distill:` in the config, rlfactory_nb/config_distill.py).

    rows (prompt_ids + response_ids, loss_mask, the engine's logprob of each sampled token)
      -> teacher.score(ids): log p_teacher of every token, from one forward over the student's ids
      -> per trained token: kl = student - teacher logprob (algo/distill.py)
      -> advantage = -coef * kl (+ the reward's group-relative advantage unless `distill.only`)

The student's log-prob is the rollout engine's (`Trajectory.logprobs`: the unmodified,
temperature-1 distribution of the weights that sampled), so distillation costs the teacher's forward
and nothing on the student's side. The rows are the training rows, after an agent program's episode
is split into its segments, so every multi-turn shape (tools, environments, users, programs) is
scored the same way: only the tokens with loss mask 1 get a value.

The teacher is an engine (engines/base.py `Engine.score`): the backend starts it with the run, in
this process on the local backend, as an engine actor of its own on Ray (`RayBackend.teacher`). It
scores token ids and never sees text, so it must share the student's tokenizer: `same_tokenizer`
refuses another one with an error naming both (docs/decisions.md, "On-policy distillation").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from rlfactory_nb.algo.distill import distill_advantages, mean_reverse_kl, reverse_kl
from rlfactory_nb.config import RunConfig
from rlfactory_nb.config_distill import DistillConfig, distill_problems
from rlfactory_nb.engines.base import Engine
from rlfactory_nb.errors import ConfigError, TokenizerMismatch
from rlfactory_nb.types import Trajectory

TEACHER_KEY = "teacher_logprobs"
"""Trajectory.metadata key: the teacher's log-prob of each sampled token (as `Trajectory.logprobs`)"""


class Distillation:
    """The teacher's side of a run's steps: `advantages` of a step's training rows, and its metrics."""

    def __init__(self, config: DistillConfig, teacher: Engine, student_tokenizer: Any):
        same_tokenizer(student_tokenizer, getattr(teacher, "tokenizer", None), config.teacher)
        self.config = config
        self.teacher = teacher
        self._slots = asyncio.Semaphore(config.max_concurrency)

    @classmethod
    def from_config(cls, cfg: RunConfig, teacher: Engine | None, student_tokenizer: Any) -> Distillation | None:
        """The run's distillation, on the `teacher` engine its backend started; None without `distill:`."""
        if cfg.distill is None:
            return None
        if teacher is None:
            raise ConfigError("distill.teacher: this run's backend started no teacher engine")
        if problems := distill_problems(cfg):
            raise ConfigError(problems)
        return cls(cfg.distill, teacher, student_tokenizer)

    async def advantages(
        self, rows: Sequence[Trajectory], advantages: Tensor | Sequence[Sequence[float]]
    ) -> tuple[list[list[float]], dict[str, float]]:
        """Per-token advantages of `rows` (one list per row, aligned with its `response_ids`) and the
        step's `distill/...` metrics. `advantages`: the reward's, one per row ((B,) tensor) or one
        list per row (per-turn credit); ignored with `distill.only`. Each row's teacher log-probs go to
        `metadata["teacher_logprobs"]` (the trajectory view reads them)."""
        started = time.perf_counter()
        teacher = await asyncio.gather(*(self._score(row) for row in rows))
        seconds = time.perf_counter() - started
        mask = _padded([row.loss_mask for row in rows], torch.bool)  # (B, R)
        student = _on_mask([row.logprobs for row in rows], mask)  # (B, R)
        kl = reverse_kl(student, _on_mask(teacher, mask), mask)
        base = None if self.config.only else _base(advantages, mask.shape[-1])
        combined = distill_advantages(kl, mask, self.config.coef, base)  # (B, R)
        for row, values in zip(rows, teacher):
            row.metadata[TEACHER_KEY] = [round(value, 5) for value in values]
        metrics = {
            "distill/reverse_kl": mean_reverse_kl(kl, mask),
            "distill/teacher_s": seconds,
            "distill/tokens": float(mask.sum()),
        }
        return [combined[index, : len(row.response_ids)].tolist() for index, row in enumerate(rows)], metrics

    async def _score(self, row: Trajectory) -> list[float]:
        """The teacher's log-prob of each sampled token of `row` (mask 1), in order."""
        async with self._slots:
            scores = await self.teacher.score([*row.prompt_ids, *row.response_ids])  # len - 1 values
        start = len(row.prompt_ids) - 1  # scores[i] is token i + 1's: the first response token's is start
        response = scores[start : start + len(row.response_ids)]
        return [value for value, trained in zip(response, row.loss_mask) if trained]


def same_tokenizer(student: Any, teacher: Any, teacher_name: str) -> None:
    """Raise TokenizerMismatch unless `teacher` maps every token to the id `student` does (the same
    vocabulary, added tokens included): the teacher scores the student's ids, never its text."""
    if teacher is None:
        raise ConfigError(f"distill.teacher {teacher_name!r}: its engine has no tokenizer to check against the student's")
    theirs, ours = teacher.get_vocab(), student.get_vocab()
    if theirs == ours:
        return
    differing = sorted(set(theirs.items()) ^ set(ours.items()), key=lambda item: item[1])
    token, _ = differing[0]
    where = f"token {token!r} is id {ours.get(token)} in the student's and {theirs.get(token)} in the teacher's"
    raise TokenizerMismatch(
        f"distill.teacher {teacher_name!r}: its tokenizer ({_name(teacher)}, {len(theirs)} tokens) is not the "
        f"student's ({_name(student)}, {len(ours)} tokens): {where}. A teacher scores the student's token ids, "
        "so it must share the student's tokenizer: choose a teacher of the same model family and vocabulary"
    )


def _name(tokenizer: Any) -> str:
    return f"{type(tokenizer).__name__} {getattr(tokenizer, 'name_or_path', '') or '(unnamed)'}"


def _padded(rows: Sequence[Sequence[Any]], dtype: torch.dtype) -> Tensor:
    """Lists of unequal length -> (B, max length), right-padded with zeros."""
    table = torch.zeros((len(rows), max((len(row) for row in rows), default=0)), dtype=dtype)
    for index, values in enumerate(rows):
        table[index, : len(values)] = torch.as_tensor(list(values), dtype=dtype)
    return table


def _on_mask(values: Sequence[Sequence[float]], mask: Tensor) -> Tensor:
    """One value per sampled token of each row, placed at the row's mask == 1 positions: (B, R)."""
    table = torch.zeros(mask.shape, dtype=torch.float32)
    for index, row in enumerate(values):
        table[index][mask[index]] = torch.as_tensor(list(row), dtype=torch.float32)
    return table


def _base(advantages: Tensor | Sequence[Sequence[float]], width: int) -> Tensor:
    """The reward's advantages as (B,) or (B, width)."""
    if isinstance(advantages, Tensor):
        return advantages.float()
    return _padded([list(row)[:width] for row in advantages], torch.float32)[:, :width]
