"""What one training step measured, and the stream it is written to.

Each step appends one flat JSON object to `runs/<name>/metrics.jsonl` (and TensorBoard event files
under `runs/<name>/tensorboard/` when the `tensorboard` package is installed). Keys are grouped by a
prefix; every row has at least `STEP_KEYS`:

    step, time                              step number (1-based), unix time of the row
    reward/mean, reward/std, reward/<fn>    the training reward over all trajectories, each component
    rollout/...                             trajectories, response tokens, turns, tool calls per
                                            trajectory, tool-call rate (share with >= 1 call),
                                            parse errors, finish/<reason> counts, truncated (cut off
                                            by a limit), masked_truncated (of those, left out of
                                            the loss by grpo.mask_truncated), template_drift_expected
                                            / _other (ids unlike a full template render: Qwen3's
                                            dropped think blocks, or anything else)
    sampling/...                            rounds (of prompts rolled out; > 1 with dynamic
                                            sampling), prompts_drawn
    tools/...                               status/<status> counts, latency_mean_s, cached_fraction
    groups/...                              total (scored), zero_variance (all rewards equal),
                                            trained, env_failed (left out unscored: an episode
                                            failed before the model's first token)
    advantages/...                          mean, std, abs_mean over trained trajectories
    train/...                               loss, clip fractions, ratio, kl, entropy, grad_norm, lr,
                                            optimizer_steps (absent when no group had signal)
    time/...                                rollout_s, reward_s, update_s, sync_s, step_s,
                                            wait_rollouts_s (the trainer waiting for rollouts)
    async/...                               max_staleness (the bound in force; 0: synchronous),
                                            staleness_mean/_max (versions behind, trained samples),
                                            engine_busy_share, trainer_busy_share (of the step's
                                            wall time; see rlfactory_nb.train.pipeline)
    throughput/...                          sampled tokens per second of rollout and of the step
    eval/...                                sampled and greedy held-out reward (eval steps only)

A resumed run first drops rows past its checkpoint (`truncate_after`), so every step appears once.

Numbers alone do not show reward hacking or a broken format, so the trackers also get a few of each
step's trajectories (`sample_rows`, `MetricsWriter.write_samples`): W&B a `samples` table, TensorBoard
a Markdown table as text. metrics.jsonl does not: the run's trajectories/ folder keeps them whole.
"""

from __future__ import annotations

import contextlib
import json
import math
import secrets
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

from rlfactory_nb.errors import MissingExtraError
from rlfactory_nb.local_files import open_append, read_regular, write_atomic
from rlfactory_nb.train.run_folder import METRICS_FILE, TENSORBOARD, WANDB_ID_FILE, read_metrics
from rlfactory_nb.types import Sample, Trajectory

STEP_KEYS = (
    "step",
    "time",
    "reward/mean",
    "reward/std",
    "rollout/trajectories",
    "rollout/response_tokens_mean",
    "rollout/turns_mean",
    "rollout/tool_calls_per_trajectory",
    "rollout/tool_call_rate",
    "rollout/parse_errors",
    "rollout/calls_in_reasoning",
    "rollout/truncated",
    "sampling/rounds",
    "sampling/prompts_drawn",
    "groups/total",
    "groups/zero_variance",
    "groups/trained",
    "groups/env_failed",
    "time/rollout_s",
    "time/reward_s",
    "time/update_s",
    "time/sync_s",
    "time/step_s",
    "time/wait_rollouts_s",
    "async/max_staleness",
    "async/staleness_mean",
    "async/staleness_max",
    "async/engine_busy_share",
    "async/trainer_busy_share",
)


def groups_metrics(step: int, drawn: Any, trained_groups: int, advantages: Any, masked: int) -> dict[str, float]:
    """A step's row from what it drew (`rlfactory_nb.train.selection.StepGroups`): rewards, rollouts,
    sampling rounds, group counts and the advantages of the trained groups."""
    # deferred: torch; reading metrics (read_metrics, the dashboard) needs none
    from rlfactory_nb.algo.advantages import zero_variance_groups

    outcomes = [outcome for group in drawn.outcomes for outcome in group]
    return {
        "step": step,
        **reward_metrics([o.score for o in outcomes], [o.components for o in outcomes]),
        **rollout_metrics([traj for group in drawn.groups for traj in group]),
        "reward/failures": sum(len(o.errors) for o in outcomes),
        "rollout/masked_truncated": masked,
        "sampling/rounds": drawn.rounds,
        "sampling/prompts_drawn": drawn.prompts,
        "groups/total": len(drawn.groups),
        "groups/zero_variance": int(zero_variance_groups(drawn.rewards).sum()) if drawn.groups else 0,
        "groups/trained": trained_groups,
        "groups/env_failed": len(drawn.failed),
        **summary_stats(_per_trajectory(advantages), "advantages"),
    }


def _per_trajectory(advantages: Any) -> list[float]:
    """One advantage per trajectory: the values of a tensor, or a token-level row's largest |value|."""
    if hasattr(advantages, "tolist"):
        return advantages.tolist()
    return [max(values, key=abs) if values else 0.0 for values in advantages]


def rollout_metrics(trajectories: Sequence[Trajectory], prefix: str = "rollout") -> dict[str, float]:
    """Counts and means over trajectories: tokens, turns, tool calls and their outcomes, finish reasons."""
    count = max(len(trajectories), 1)
    results = [result for traj in trajectories for result in traj.tool_results()]
    calls = [len(traj.tool_calls()) for traj in trajectories]
    metrics: dict[str, float] = {
        f"{prefix}/trajectories": len(trajectories),
        f"{prefix}/response_tokens_mean": sum(t.num_sampled_tokens for t in trajectories) / count,
        f"{prefix}/turns_mean": sum(t.num_turns for t in trajectories) / count,
        f"{prefix}/tool_calls_per_trajectory": sum(calls) / count,
        f"{prefix}/tool_call_rate": sum(1 for n in calls if n) / count,
        f"{prefix}/parse_errors": sum(len(turn.parse_errors) for t in trajectories for turn in t.turns),
        # calls drafted inside reasoning are never run; a policy that learns to draft them shows here
        f"{prefix}/calls_in_reasoning": sum(turn.calls_in_reasoning for t in trajectories for turn in t.turns),
        f"{prefix}/truncated": sum(1 for t in trajectories if t.truncated),
        **drift_counts(trajectories, prefix),
    }
    for reason, number in Counter(t.finish_reason for t in trajectories).items():
        metrics[f"{prefix}/finish/{reason}"] = number
    if prefix == "rollout":
        metrics.update(tool_metrics(results))
    return metrics


def drift_counts(trajectories: Sequence[Trajectory], prefix: str = "rollout") -> dict[str, int]:
    """Trajectories whose ids differ from a full chat-template render: by the empty think blocks
    Qwen3's template drops (expected, not warned), and otherwise (warned; see rollout/tokens.py).

    >>> drift_counts([Trajectory([1], metadata={"drift_position": 7, "dropped_think_blocks": 1}),
    ...               Trajectory([1], metadata={"drift_position": 9, "dropped_think_blocks": 0}),
    ...               Trajectory([1], metadata={"drift_position": -1, "dropped_think_blocks": 0}),
    ...               Trajectory([1])])
    {'rollout/template_drift_expected': 1, 'rollout/template_drift_other': 1}
    """
    # drift_position: None when the check did not run, -1 when the ids equal a full render
    positions = [(t.metadata.get("drift_position"), t.metadata.get("dropped_think_blocks", 0)) for t in trajectories]
    drifted = [dropped for position, dropped in positions if position is not None and position >= 0]
    expected = sum(1 for dropped in drifted if dropped > 0)
    return {f"{prefix}/template_drift_expected": expected, f"{prefix}/template_drift_other": len(drifted) - expected}


def tool_metrics(results: Sequence[Any]) -> dict[str, float]:
    metrics: dict[str, float] = {"tools/calls": len(results)}
    for status, number in Counter(result.status for result in results).items():
        metrics[f"tools/status/{status}"] = number
    if results:
        metrics["tools/latency_mean_s"] = sum(result.latency_s for result in results) / len(results)
        metrics["tools/cached_fraction"] = sum(1 for result in results if result.cached) / len(results)
    return metrics


def reward_metrics(
    scores: Sequence[float], components: Sequence[dict[str, float]], prefix: str = "reward"
) -> dict[str, float]:
    """Mean and (population) std of the training reward, and the mean of every named component."""
    metrics = {f"{prefix}/mean": _mean(scores), f"{prefix}/std": _std(scores)}
    names = sorted({name for row in components for name in row})
    for name in names:
        metrics[f"{prefix}/{name}"] = _mean([row[name] for row in components if name in row])
    return metrics


def summary_stats(values: Sequence[float], prefix: str) -> dict[str, float]:
    """mean, std and mean absolute value, e.g. of advantages."""
    return {
        f"{prefix}/mean": _mean(values),
        f"{prefix}/std": _std(values),
        f"{prefix}/abs_mean": _mean([abs(v) for v in values]),
    }


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def _std(values: Sequence[float]) -> float:
    if not values:
        return 0.0
    mean = _mean(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


@dataclass(frozen=True)
class SampleRow:
    """One trajectory as the trackers show it."""

    step: int
    prompt: str
    """the last prompt message"""
    tool_calls: str
    """one `name({arguments})` per line"""
    answer: str
    """the final answer, reasoning set apart"""
    reward: float
    advantage: float | None
    """None when the step did not train on it (a group without reward variance, a masked truncation)"""


SAMPLE_COLUMNS = ("step", "prompt", "tool_calls", "answer", "reward", "advantage")


def sample_rows(
    step: int, groups: Sequence[Sequence[Trajectory]], outcomes: Sequence[Sequence[Any]],
    trained: Sequence[Trajectory], advantages: Any, limit: int,
) -> list[SampleRow]:
    """The step's first `limit` trajectories (whole groups first, so their rewards compare), each with
    its reward and, when it was trained on, its advantage (`trained` and `advantages` align)."""
    advantage_of = dict(zip(map(id, trained), _per_trajectory(advantages)))
    scored = [(traj, outcome.score) for group, row in zip(groups, outcomes) for traj, outcome in zip(group, row)]
    return [_sample_row(step, traj, reward, advantage_of.get(id(traj))) for traj, reward in scored[:limit]]


def _sample_row(step: int, traj: Trajectory, reward: float, advantage: float | None) -> SampleRow:
    sample = Sample.from_trajectory(traj)
    prompt = str(sample.prompt[-1].get("content", "")) if sample.prompt else ""
    calls = "\n".join(f"{call.name}({json.dumps(call.arguments, ensure_ascii=False)})" for call in sample.tool_calls)
    return SampleRow(step, prompt, calls, sample.final_answer, reward, advantage)


def samples_markdown(rows: Sequence[SampleRow]) -> str:
    """A Markdown table of `rows` (TensorBoard renders text as Markdown).

    >>> print(samples_markdown([SampleRow(3, "2+2?", 'calculator({"expression": "2+2"})', "4", 1.0, 0.5)]))
    | step | prompt | tool_calls | answer | reward | advantage |
    |---|---|---|---|---|---|
    | 3 | 2+2? | calculator({"expression": "2+2"}) | 4 | 1.0 | 0.5 |
    """
    lines = ["| " + " | ".join(SAMPLE_COLUMNS) + " |", "|" + "---|" * len(SAMPLE_COLUMNS)]
    for row in rows:
        cells = ("" if value is None else str(value) for value in astuple(row))
        lines.append("| " + " | ".join(cell.replace("|", "\\|").replace("\n", "<br>") for cell in cells) + " |")
    return "\n".join(lines)


class StepTimer:
    """Wall time per phase of a step, as `time/<phase>_s` metrics: `with timer("rollout"): ...`."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            key = f"time/{name}_s"  # a phase entered several times (dynamic sampling's rounds) adds up
            self._seconds[key] = self._seconds.get(key, 0.0) + time.perf_counter() - started

    def seconds(self) -> dict[str, float]:
        return dict(self._seconds)


class MetricsWriter:
    """Appends step rows to metrics.jsonl (flushed per row, so a crash loses at most the step in flight)."""

    def __init__(
        self,
        run_dir: str | Path,
        tensorboard: bool = True,
        wandb_project: str | None = None,
        config: dict[str, Any] | None = None,
    ):
        self.path = Path(run_dir) / METRICS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._board = _tensorboard_writer(Path(run_dir) / TENSORBOARD) if tensorboard else None
        self._wandb = _wandb_run(Path(run_dir), wandb_project, config) if wandb_project else None

    def write(self, row: dict[str, Any]) -> None:
        row = {"time": time.time(), **row}
        with open_append(self.path) as out:  # never through a link planted in a shared folder
            out.write((json.dumps(row, default=float) + "\n").encode("utf-8"))
        if self._board is not None:
            for key, value in row.items():
                if isinstance(value, (int, float)) and key not in ("step", "time"):
                    self._board.add_scalar(key, value, global_step=int(row["step"]))
            self._board.flush()
        if self._wandb is not None:
            numbers = {k: v for k, v in row.items() if isinstance(v, (int, float)) and k != "step"}
            self._wandb.log(numbers, step=int(row["step"]), commit=True)  # now, not at the next step

    def write_samples(self, step: int, rows: Sequence[SampleRow]) -> None:
        """A few of step `step`'s trajectories to TensorBoard (text) and W&B (a table); call it before
        `write` for that step, which commits the step's W&B row."""
        if not rows:
            return
        if self._board is not None:
            self._board.add_text("samples", samples_markdown(rows), global_step=step)
            self._board.flush()
        if self._wandb is not None:
            import wandb

            table = wandb.Table(columns=list(SAMPLE_COLUMNS), data=[list(astuple(row)) for row in rows])
            self._wandb.log({"samples": table}, step=step, commit=False)

    def truncate_after(self, step: int) -> None:
        """Drop rows of steps after `step` (written by a run that crashed before its next checkpoint)."""
        if not self.path.exists():
            return
        kept = [row for row in read_metrics(self.path.parent) if int(row.get("step", 0)) <= step]
        write_atomic(self.path, "".join(json.dumps(row) + "\n" for row in kept).encode("utf-8"))

    def close(self) -> None:
        if self._board is not None:
            self._board.close()
        if self._wandb is not None:
            self._wandb.finish()


def _tensorboard_writer(folder: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is optional: metrics.jsonl is the record
        return None
    return SummaryWriter(str(folder))


def _wandb_run(run_dir: Path, project: str, config: dict[str, Any] | None) -> Any:
    """A W&B run whose id lives in the run folder, so `resume` logs into the same W&B run."""
    try:
        import wandb
    except ImportError as error:
        raise MissingExtraError(
            f"wandb_project={project!r} needs the wandb package: pip install 'rlfactory-nb[wandb]' "
            "(or remove wandb_project from the config)"
        ) from error
    id_file = run_dir / WANDB_ID_FILE
    if not id_file.exists():
        write_atomic(id_file, secrets.token_hex(4).encode())  # W&B ids: [a-z0-9]
    run_id = read_regular(id_file, 256).decode("utf-8", errors="replace").strip()
    return wandb.init(
        project=project, name=run_dir.name, id=run_id, resume="allow", dir=str(run_dir), config=config
    )
