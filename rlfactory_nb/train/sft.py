"""Supervised fine-tuning on trajectories, and rejection sampling, on GRPO's own machinery.

SFT is not a second trainer. Its rows are GRPO's (`sft_data.sft_batch`: prompt + response ids, the
loss mask of the tokens the policy wrote), its loss is one registered function (`sft` in
algo/losses.py: the mean negative log-likelihood over masked tokens), and one optimizer step is one
`Backend.update` (train/update.py) of the run's backend, local or Ray. So LoRA, packing, chunked
log-probs, float32 master weights, checkpoints and resume, metrics.jsonl and the run folder are the
ones a GRPO run uses. `update_config` says how the `sft:` section drives that update.

    sft(cfg, data)                   data -> kept trajectories -> sft.steps updates -> checkpoint
    rejection_sampling(cfg, ...)     per round: k samples per prompt with the current policy ->
                                     rewards -> keep those >= min_reward -> sft.steps updates -> sync

Metrics rows carry `sft/loss`, `sft/tokens` (trained tokens of the step), `sft/lr`, `sft/grad_norm`,
and per rejection round `rejection/sampled`, `rejection/kept`, `rejection/reward_mean`. Resume
(`resume=True`) continues from `checkpoints/latest`; the data order is a function of (seed, step),
so no batch is repeated or skipped. A resumed rejection-sampling run starts at the round after the
checkpoint (each round ends with one).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rlfactory_nb._async import maybe_await, run_sync
from rlfactory_nb.config import RunConfig
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.data.rows import PromptOrder
from rlfactory_nb.errors import ConfigError, RunFolderExistsError
from rlfactory_nb.models import checkpoint as ckpt
from rlfactory_nb.models.policy import Policy, resolve_device
from rlfactory_nb.reasoning_mode import thinking_mode
from rlfactory_nb.rollout.groups import rollout_groups
from rlfactory_nb.runtime import Runtime, check_names
from rlfactory_nb.seeds import SampleId
from rlfactory_nb.train.backends import make_backend
from rlfactory_nb.train.metrics import MetricsWriter, read_metrics
from rlfactory_nb.train.run_folder import RunFolder
from rlfactory_nb.train.sft_data import sft_batch, sft_trajectories
from rlfactory_nb.train.trainable import TrainingSetup
from rlfactory_nb.types import Sample, Trajectory

log = logging.getLogger(__name__)
StepCallback = Callable[[dict[str, Any]], Any]


@dataclass(frozen=True)
class SFTResult:
    run_dir: Path
    step: int
    """the last completed optimizer step"""
    metrics: dict[str, Any]
    """the last step's metrics row"""
    checkpoint: Path | None
    rounds: list[dict[str, float]] = field(default_factory=list)
    """rejection sampling: one summary per round (sampled, kept, mean reward)"""


def update_config(cfg: RunConfig, rounds: int = 1) -> RunConfig:
    """The run config the shared update reads (`UpdateSettings.from_config`, the backends): the
    `sft` loss, one pass, `sft.batch_size` rows per optimizer step, `sft.lr` on its schedule over
    every step of the run, no KL reference, no entropy bonus, no engine importance weights. The
    micro-batching, packing, chunking and precision settings are the run's `grpo:` ones."""
    sft = cfg.sft
    return cfg.replace({
        "grpo.loss": "sft", "grpo.ppo_epochs": 1, "grpo.mini_batch_size": sft.batch_size,
        "grpo.lr": sft.lr, "grpo.lr_schedule": sft.lr_schedule, "grpo.warmup_steps": sft.warmup_steps,
        "grpo.steps": sft.steps * rounds, "grpo.seed": sft.seed, "grpo.kl_coef": 0.0, "grpo.entropy_coef": 0.0,
        "grpo.truncate_ratio": None, "grpo.max_staleness": 0,
    })  # fmt: skip


class SFTTrainer:
    """One SFT run: the policy, the backend that updates it, the run folder. `start` first."""

    def __init__(
        self, cfg: RunConfig, policy: Policy | None = None, rounds: int = 1, run_dir: str | Path | None = None
    ):
        """`run_dir`: where it writes (default `cfg.run_dir`; a cluster job on storage trains in a
        folder on its node, cluster/driver.py)."""
        self.cfg = cfg
        self.update_cfg = update_config(cfg, rounds)
        self.policy = policy
        self.run_dir = Path(run_dir if run_dir is not None else cfg.run_dir)
        self.step = 0
        self.backend: Any = None
        self.setup: TrainingSetup | None = None
        """precision and adapters, as the driver's `snapshot` reads them (set by `start`)"""
        self.metrics: MetricsWriter | None = None
        self.last_checkpoint: Path | None = None

    async def start(self, resume: bool = False) -> SFTTrainer:
        cfg = self.cfg
        checkpoint = ckpt.load_latest(self.run_dir)
        if not resume and (checkpoint is not None or read_metrics(self.run_dir)):
            raise RunFolderExistsError(
                f"{self.run_dir} already holds a run: pass resume=True (CLI: --resume) to continue it, or "
                "choose another name (name=...) or output_dir"
            )
        setup = self.setup = TrainingSetup.from_config(self.update_cfg, resolve_device(cfg.model.device))
        optimizer_state = None
        if resume and checkpoint is not None:
            ckpt.check_kind(checkpoint, lora=cfg.model.lora is not None)
            state = checkpoint.trainer_state()
            self.policy = self._load(checkpoint.path)
            self.step, optimizer_state = state["step"], state["optimizer"]
            ckpt.restore_rng(state["rng"])
            self.last_checkpoint = checkpoint.path
        else:
            torch.manual_seed(cfg.sft.seed)
            self.policy = self.policy or self._load(cfg.model.name)
        self.policy.model = setup.prepare(self.policy.model)
        self.metrics = MetricsWriter(self.run_dir, wandb_project=cfg.wandb_project, config=cfg.to_dict())
        self.metrics.truncate_after(self.step)
        self.backend = make_backend(self.update_cfg, self.policy, optimizer_state, None, self.step)
        if cfg.model.lora is not None:  # engines that load a folder start from the base: merge in now
            await self.backend.sync_weights(self.step)
        return self

    def _load(self, name_or_path: str | Path) -> Policy:
        model = self.cfg.model
        return Policy.load(
            name_or_path,
            device=model.device,
            dtype=model.master_dtype,
            trainable_adapter=True,
            trust_remote_code=model.trust_remote_code,
        )

    @property
    def pad_id(self) -> int:
        tokenizer = self.policy.tokenizer
        return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    async def train_on(
        self,
        trajectories: list[Trajectory],
        until: int,
        extra: Mapping[str, float] | None = None,
        on_step: StepCallback | None = None,
        stop_event: asyncio.Event | None = None,
    ) -> dict[str, Any]:
        """Optimizer steps on `trajectories` until step `until`, checkpointed every
        `sft.checkpoint_every` and at `until`; returns the last metrics row. A step's rows are
        `sft.batch_size` of them, in an order that is a function of (seed, step). A set `stop_event`
        ends it after the step in flight (a cluster job's `job.stop()`; the driver checkpoints it)."""
        order = PromptOrder(len(trajectories), self.cfg.sft.batch_size, self.cfg.sft.seed)
        row: dict[str, Any] = {}
        every = self.cfg.sft.checkpoint_every
        while self.step < until and not (stop_event is not None and stop_event.is_set()):
            step, started = self.step + 1, time.perf_counter()
            batch = sft_batch(order.rows(trajectories, step), self.pad_id)
            trained = await self.backend.update(batch, step)
            self.step = step
            row = {"step": step, **sft_metrics(trained), **(extra or {})}
            row["time/update_s"] = row["time/step_s"] = time.perf_counter() - started
            self.metrics.write(row)
            if step == until or (every and step % every == 0):
                await self.save_checkpoint()
            if on_step is not None:
                await maybe_await(on_step(row))
        await self.backend.sync_weights(self.step)  # engines sample from the tuned weights next
        return row

    async def save_checkpoint(self) -> Path:
        saved = ckpt.save_checkpoint(
            self.run_dir,
            self.step,
            await self.backend.checkpoint_model(),
            self.policy.tokenizer,
            await self.backend.optimizer_state(),
            self.recorded_config(),
            keep_last=self.cfg.grpo.keep_last,
        )
        self.last_checkpoint = saved.path
        return saved.path

    async def fine_tune(
        self, source: Any, on_step: StepCallback | None = None, stop_event: asyncio.Event | None = None
    ) -> SFTResult:
        """`sft.steps` steps on what `source` holds (train/sft_data.py), kept by `sft.min_reward`."""
        cfg = self.cfg
        tokenizer, thinking = self.policy.tokenizer, bool(thinking_mode(cfg))
        kept = sft_trajectories(source, tokenizer, cfg.sft.min_reward, cfg.rollout.chat_format, thinking)
        log.info("%s: fine-tuning on %d of %d trajectories", cfg.name, len(kept.trajectories), kept.seen)
        row = await self.train_on(kept.trajectories, cfg.sft.steps, kept.metrics(), on_step, stop_event)
        return self.result(row or {"step": self.step})

    def recorded_config(self) -> RunConfig:
        """The config a checkpoint keeps (run_config.yaml): what trained."""
        return self.cfg

    def result(self, row: dict[str, Any], rounds: list[dict[str, float]] | None = None) -> SFTResult:
        return SFTResult(self.run_dir, self.step, row, self.last_checkpoint, rounds or [])

    async def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
        if self.backend is not None:
            await self.backend.close()


def sft_metrics(trained: Mapping[str, float]) -> dict[str, float]:
    """The update's `train/...` metrics under `sft/`: the loss is the NLL, the tokens those trained.
    The engine-gap metrics are left out (SFT rows carry no engine log-probs)."""
    names = {"loss": "loss", "tokens": "tokens", "lr": "lr", "grad_norm": "grad_norm", "entropy": "entropy",
             "response_tokens_mean": "response_tokens_mean", "padding_tokens": "padding_tokens"}  # fmt: skip
    return {
        f"sft/{ours}": float(trained[f"train/{theirs}"])
        for ours, theirs in names.items()
        if f"train/{theirs}" in trained
    }


async def sft(
    cfg: RunConfig,
    data: Any = None,
    policy: Policy | None = None,
    resume: bool = False,
    on_step: StepCallback | None = None,
    replace: bool = False,
) -> SFTResult:
    """Fine-tune on `data` (train/sft_data.py: trajectories, a RewardLab, conversation rows, a run
    folder or a file; None: `sft.data`) kept by `sft.min_reward`, for `sft.steps` optimizer steps.
    `replace`: delete the run folder first and start over."""
    source = data if data is not None else cfg.sft.data
    if source is None:
        raise ConfigError(
            ["sft.data: give data=... (trajectories, conversation rows, a RewardLab) or set sft.data"]
        )
    _clear(cfg, replace and not resume)
    trainer = SFTTrainer(cfg, policy)
    try:
        await trainer.start(resume=resume)
        return await trainer.fine_tune(source, on_step)
    finally:
        await trainer.close()


def _clear(cfg: RunConfig, replace: bool) -> None:
    if replace:
        RunFolder(cfg.run_dir).store.remove("")


def sft_sync(cfg: RunConfig, data: Any = None, **options: Any) -> SFTResult:
    """`sft` from a plain script or a notebook cell."""
    return run_sync(sft(cfg, data, **options))


async def rejection_sampling(
    cfg: RunConfig,
    rounds: int | None = None,
    k: int | None = None,
    min_reward: float | None = None,
    reward: Any = None,
    tools: Any = None,
    train_data: Any = None,
    policy: Policy | None = None,
    resume: bool = False,
    on_step: StepCallback | None = None,
    replace: bool = False,
) -> SFTResult:
    """Expert iteration in one call: for `rounds` rounds (default `sft.rounds`), sample `k`
    (`sft.samples_per_prompt`) trajectories for each of `sft.prompts_per_round` prompts of the train
    rows with the current policy, score them with the run's reward, keep those scoring at least
    `min_reward` (`sft.min_reward`), and fine-tune on them for `sft.steps` steps. Every sampled
    trajectory is saved to the run folder with its reward (trajectories/step_*.jsonl).
    `reward`, `tools`, `train_data`: objects from the kernel, as `rf.train_sync` takes them;
    `replace`: delete the run folder first."""
    overrides = {"sft.rounds": rounds, "sft.samples_per_prompt": k, "sft.min_reward": min_reward}
    cfg = cfg.replace({key: value for key, value in overrides.items() if value is not None})
    if cfg.sft.min_reward is None:
        raise ConfigError(
            ["sft.min_reward: rejection sampling keeps samples scoring at least a threshold: set one"]
        )
    objects = RunObjects.of(reward, tools, train_data)
    check_names(cfg, objects, resume)
    _clear(cfg, replace and not resume)
    trainer = SFTTrainer(cfg, policy, rounds=cfg.sft.rounds)
    runtime = Runtime.from_config(cfg, objects)
    summaries: list[dict[str, float]] = []
    row: dict[str, Any] = {}
    try:
        await trainer.start(resume=resume)
        await runtime.start()
        agent = runtime.use(trainer.backend.engine, trainer.policy).agent()
        rows = runtime.train_rows()
        for number in range(trainer.step // cfg.sft.steps + 1, cfg.sft.rounds + 1):
            scored = await _sample_round(cfg, agent, runtime, rows, number)
            # filed under the first step they train, so each round has a file of its own
            RunFolder(trainer.run_dir).write_trajectories((number - 1) * cfg.sft.steps + 1, scored)
            kept = [
                traj
                for traj in scored
                if traj.metadata["reward"] >= cfg.sft.min_reward and any(traj.loss_mask)
            ]
            rewards = [traj.metadata["reward"] for traj in scored]
            summary = {"rejection/round": float(number), "rejection/sampled": float(len(scored)),
                       "rejection/kept": float(len(kept)), "rejection/reward_mean": sum(rewards) / len(rewards)}  # fmt: skip
            summaries.append(summary)
            log.info("%s: round %d kept %d of %d samples", cfg.name, number, len(kept), len(scored))
            if not kept:
                log.warning(
                    "round %d kept no sample scoring >= %s: nothing to fine-tune on",
                    number,
                    cfg.sft.min_reward,
                )
                continue
            row = await trainer.train_on(kept, number * cfg.sft.steps, summary, on_step)
        return trainer.result(row, summaries)
    finally:
        await runtime.close()
        await trainer.close()


async def _sample_round(
    cfg: RunConfig, agent: Any, runtime: Runtime, rows: list[dict[str, Any]], number: int
) -> list[Trajectory]:
    """Round `number`'s samples: k per prompt, scored, each with `metadata["reward"]` set."""
    sft = cfg.sft
    prompts = PromptOrder(len(rows), sft.prompts_per_round, sft.seed).rows(rows, number)

    def sample_id(prompt: int, sample: int) -> SampleId:
        return SampleId(sft.seed, number, prompt, sample)

    groups = await rollout_groups(
        agent,
        prompts,
        sft.samples_per_prompt,
        cfg.rollout.max_in_flight,
        sample_ids=sample_id,
        keep_open=True,  # rewards read `sample.env` before it closes (a shared ToolSet is never kept)
    )
    try:
        samples = [
            [Sample.from_trajectory(traj, env=agent.env_of(traj)) for traj in group] for group in groups
        ]
        outcomes = await runtime.reward.score_groups(samples)
    finally:
        await agent.close_episodes([traj for group in groups for traj in group])
    scored = []
    for group, group_outcomes in zip(groups, outcomes):
        for traj, outcome in zip(group, group_outcomes):
            traj.metadata.update(step=number, reward=outcome.score, reward_components=outcome.components)
            scored.append(traj)
    return scored


def rejection_sampling_sync(cfg: RunConfig, **options: Any) -> SFTResult:
    """`rejection_sampling` from a plain script or a notebook cell."""
    return run_sync(rejection_sampling(cfg, **options))


__all__ = [
    "SFTResult",
    "SFTTrainer",
    "rejection_sampling",
    "rejection_sampling_sync",
    "sft",
    "sft_sync",
    "update_config",
]
