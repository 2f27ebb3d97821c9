"""The GRPO training loop. `Trainer.step_once` reads as the algorithm:

    take the step's scored groups (train/steps.py: prompts seeded by step -> group rollouts ->
    rewards -> episodes closed -> dynamic sampling's refills) -> the groups with signal ->
    group-relative advantages -> leave truncated trajectories out (mask_truncated) -> mini-batched
    policy update -> push weights to the engines -> metrics row -> (periodically) held-out eval and
    checkpoint

Which groups and trajectories a step trains on is `rlfactory_nb.train.selection`'s business.

Where the update and the engines run is the backend's business (`LocalBackend`: one process, no Ray;
`RayBackend`: policy workers and engine actors), so this file is the same for a laptop and a cluster.
`train(cfg)` runs a whole run; `train_sync` is its twin for plain scripts and notebook cells.

Resume: with `resume=True` the run restarts from `runs/<name>/checkpoints/latest`: weights, optimizer,
RNG states and step. Prompts for step k are a function of (seed, k), and metric rows written after
the checkpoint by the interrupted run are dropped, so no step is lost or repeated.

Failures: everything a config can get wrong (datasets, reward function, tools file) is loaded before
the backend starts any worker. A backend that fails mid-step (a policy worker or engine actor died)
raises `StepFailed`, naming the step, the phase, the dead actor when Ray says which, and the
checkpoint to resume from.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from rlfactory_nb._async import maybe_await, run_sync
from rlfactory_nb.config import RunConfig
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.errors import RunFolderExistsError, StepFailed  # noqa: F401 (StepFailed's old path)
from rlfactory_nb.eval import held_out_metrics, held_out_rollouts
from rlfactory_nb.models import checkpoint as ckpt
from rlfactory_nb.models.policy import Policy, resolve_device
from rlfactory_nb.programs.assembly import expand_segments, program_metrics
from rlfactory_nb.rewards.runner import RewardRunner
from rlfactory_nb.rewards.values import RewardFunction
from rlfactory_nb.rollout.player import EpisodePlayer
from rlfactory_nb.runtime import Runtime, check_names
from rlfactory_nb.tools.cache import SharedCache
from rlfactory_nb.tools.extra import ExtraTools
from rlfactory_nb.train.backends import check_engine_kind, make_backend, uses_ray
from rlfactory_nb.train.batch import build_batch
from rlfactory_nb.train.credit import assign_credit, record_turn_advantages
from rlfactory_nb.train.distill import Distillation
from rlfactory_nb.train.failures import StepGuard
from rlfactory_nb.train.metrics import MetricsWriter, StepTimer, groups_metrics, read_metrics, sample_rows
from rlfactory_nb.train.pipeline import effective_staleness, overlap_metrics, sample_staleness
from rlfactory_nb.train.run_folder import RunFolder
from rlfactory_nb.train.run_storage import after_upload, upload_for
from rlfactory_nb.train.selection import GroupTally, without_truncated
from rlfactory_nb.train.steps import StepSource
from rlfactory_nb.train.trainable import TrainingSetup
from rlfactory_nb.train.versioned_engine import VersionedEngine
from rlfactory_nb.types import Trajectory

StepCallback = Callable[[dict[str, Any]], Any]
StopEvent = asyncio.Event | threading.Event  # what `train` checks between steps: `is_set()`
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainResult:
    run_dir: Path | str
    """the run folder: a local Path, or its URI for a run on storage"""
    step: int
    """the last completed step"""
    metrics: dict[str, Any]
    """the last step's metrics row"""
    checkpoint: Path | str | None


class Trainer:
    """One run: owns the policy, the runtime (runtime.py), the backend, the step source
    (train/steps.py) and the run folder. `start` first."""

    def __init__(
        self,
        cfg: RunConfig,
        policy: Policy | None = None,
        reward: RewardRunner | None = None,
        objects: RunObjects | None = None,
        trust_run_objects: bool = False,
        shared_tool_cache: SharedCache | None = None,
        run_dir: Path | None = None,
    ):
        """`objects`: reward, tools and rows from the kernel (data/objects.py), used instead of what
        the config names; None on resume: those the run folder kept, if any (signed by this user
        unless `trust_run_objects`; the config's reward and tools win when it names others).
        `shared_tool_cache`: a tool cache tier shared with the job's other processes (runtime.py).
        `run_dir`: the local folder to write the run in, when not `cfg.run_dir` (a run on storage is
        trained in a local folder that the caller copies up: train/run_storage.py)."""
        self.cfg = cfg
        self.shared_tool_cache = shared_tool_cache
        self.policy = policy
        self.objects = objects or RunObjects()
        self.trust_run_objects = trust_run_objects
        self.reward = reward  # built in `start`, once the run folder's objects are known
        self.run_dir = Path(run_dir if run_dir is not None else cfg.run_dir)
        self.step = 0
        self.runtime: Runtime | None = None
        self.backend: Any = None
        self.steps: StepSource | None = None
        self.guard = StepGuard()  # a dead actor fails the step, naming the checkpoint to resume from
        self.tally = GroupTally()

    @property
    def last_checkpoint(self) -> Path | None:
        return self.guard.last_checkpoint

    # ------------------------------------------------------------------ setup

    async def start(self, resume: bool = False) -> Trainer:
        cfg = self.cfg
        checkpoint = self._resume_point(resume)
        self._keep_objects(resume)
        # The tools file, reward and data first: a mistake must fail before the backend starts workers.
        self.runtime = Runtime.from_config(
            cfg, self.objects, reward=self.reward, shared_cache=self.shared_tool_cache
        )
        self.reward = self.runtime.reward
        self.train_rows = self.runtime.train_rows()
        self.eval_rows = self.runtime.eval_rows() if cfg.grpo.eval_every else []
        check_engine_kind(cfg.model.engine)
        # The dtypes and LoRA targets are checked here too, before anything starts.
        self.setup = TrainingSetup.from_config(cfg, resolve_device(cfg.model.device))
        optimizer_state = None
        if checkpoint is not None:
            ckpt.check_kind(checkpoint, lora=cfg.model.lora is not None)
            state = checkpoint.trainer_state()
            self.policy = self._load(checkpoint.path)
            self.step, optimizer_state = state["step"], state["optimizer"]
            ckpt.restore_rng(state["rng"])
            self.guard.last_checkpoint = checkpoint.path
        else:
            torch.manual_seed(cfg.grpo.seed)
            self.policy = self.policy or self._load(cfg.model.name)
        self.policy.model = self.setup.prepare(self.policy.model)
        self.metrics = MetricsWriter(self.run_dir, wandb_project=cfg.wandb_project, config=cfg.to_dict())
        self.metrics.truncate_after(self.step)
        await self.runtime.start()
        self.guard.backend = self.backend = make_backend(
            cfg, self.policy, optimizer_state, self._reference(checkpoint), self.step
        )
        if self.backend.judge is not None:
            self.reward = self.runtime.use_judge(self.backend.judge)
        if cfg.model.lora is not None:  # engines that load a folder start from the base: merge in now
            await self.backend.sync_weights(self.step)
        self.distill = Distillation.from_config(cfg, self.backend.teacher, self.policy.tokenizer)
        self.engine = VersionedEngine(self.backend.engine, self.step)
        self.agent: EpisodePlayer = self.runtime.use(self.engine, self.policy).agent()
        self.max_staleness, mode = effective_staleness(cfg, self.policy.device.type, uses_ray(cfg))
        log.info("%s: %s", cfg.name, mode)
        self.steps = StepSource(
            cfg, self.agent, self.reward, self.train_rows, self.guard, self.step, self.max_staleness
        )
        self._mark = (time.perf_counter(), 0.0)
        return self

    def _load(self, name_or_path: str | Path) -> Policy:
        """The policy in its master dtype; a LoRA checkpoint with its adapters kept trainable."""
        model = self.cfg.model
        return Policy.load(
            name_or_path, device=model.device, dtype=model.master_dtype, trainable_adapter=True,
            trust_remote_code=model.trust_remote_code,
        )

    def _keep_objects(self, resume: bool) -> None:
        """Objects given are written to the run folder; on resume without any, the folder's are used
        (less a reward or tools file the config now names instead; one log line says which)."""
        if not self.objects.empty:
            self.objects.save(self.run_dir, config=self.cfg)
        elif resume:
            self.objects = RunObjects.resumed(self.run_dir, self.cfg, self.trust_run_objects, say=log.info)

    def _resume_point(self, resume: bool) -> ckpt.Checkpoint | None:
        latest = ckpt.load_latest(self.run_dir)
        if resume:
            return latest
        if latest is not None or read_metrics(self.run_dir):
            raise RunFolderExistsError(
                f"{self.run_dir} already holds a run: pass resume=True (CLI: --resume) to continue it, or "
                "choose another name (name=...) or output_dir"
            )
        return None

    def _reference(self, checkpoint: ckpt.Checkpoint | None) -> torch.nn.Module | None:
        """The frozen model KL is measured against: the run's starting weights (only when kl_coef > 0).
        Under LoRA the backends make it themselves: their own model with the adapters off."""
        if not self.cfg.grpo.kl_coef or self.cfg.model.lora is not None:
            return None
        if checkpoint is None:
            return self.setup.reference(self.policy.model)
        return self.setup.reference(self._load(self.cfg.model.name).model)

    # ------------------------------------------------------------------ one step

    async def step_once(self) -> dict[str, Any]:
        """Run the next step; returns its metrics row. Its rollouts may have been generated while
        earlier steps trained (grpo.max_staleness; `rlfactory_nb.train.pipeline`)."""
        grpo, step, timer, started = self.cfg.grpo, self.step + 1, StepTimer(), time.perf_counter()
        scored = await self.steps.take(step)  # rolled out, scored, episodes closed
        drawn = scored.drawn
        keep = drawn.trained(grpo)  # the groups with signal
        groups, outcomes = [drawn.groups[i] for i in keep], [drawn.outcomes[i] for i in keep]
        rewards = drawn.rewards[keep]  # (N, G)
        advantages = assign_credit(  # one per trajectory (N*G,), or per token when credit goes per turn
            grpo.advantage, groups, rewards, outcomes, grpo.scale_rewards, grpo.gamma, grpo.step_weight, grpo.step_group_scope
        )
        trained = [traj for group in groups for traj in group]
        record_turn_advantages(trained, advantages)
        masked = sum(traj.truncated for traj in trained) if grpo.mask_truncated else 0
        if masked:
            trained, advantages = without_truncated(trained, advantages)
        train_metrics: dict[str, float] = {}
        # an agent program's episode may hold several segments: each a row, one advantage
        rows, row_advantages = expand_segments(trained, advantages)
        distilled: dict[str, float] = {}
        if self.distill is not None and rows:  # the teacher's per-token reverse KL joins the advantages
            with self.guard.during(step, "the teacher's scoring"):
                row_advantages, distilled = await self.distill.advantages(rows, row_advantages)
        with timer("update"):
            if trained:
                batch = build_batch(rows, row_advantages, self.policy.tokenizer.pad_token_id)
                with self.guard.during(step, "the policy update"):
                    train_metrics = await self.backend.update(batch, step)
        with timer("sync"):
            if trained:
                with self.guard.during(step, "the weight sync"):
                    await self.backend.sync_weights(step)
                self.engine.sent_version = step
        self.engine.version = self.step = step
        self.steps.publish(step)  # asynchronous: later steps' rollouts may start now
        self.tally.add(drawn, len(keep) if trained else 0)
        if grpo.trajectories_per_step:
            RunFolder(self.run_dir).write_trajectories(step, drawn.labelled(step, grpo.trajectories_per_step))
        if self.cfg.samples_per_step:
            self.metrics.write_samples(
                step, sample_rows(step, drawn.groups, drawn.outcomes, trained, advantages, self.cfg.samples_per_step)
            )
        every = [traj for group in drawn.groups for traj in group]
        row = {
            **groups_metrics(step, drawn, len(keep), advantages, masked),
            **train_metrics,
            **distilled,
            **scored.seconds,
            **timer.seconds(),
            **self._overlap(trained, scored.waited_s, timer),
            **self.reward.usage_metrics(),  # the judge's requests, tokens and latency since the last row
            **program_metrics(every),  # agent programs' calls, merges, forks
            **self.agent.episode_metrics(reset=True),  # episodes opened and closed, env errors by kind, env time
        }
        sampled = sum(traj.num_sampled_tokens for traj in every)
        row["throughput/sampled_tokens_per_s"] = sampled / max(row["time/rollout_s"], 1e-9)
        row["time/step_s"] = time.perf_counter() - started
        return row

    def _overlap(self, trained: list[Trajectory], waited_s: float, timer: StepTimer) -> dict[str, float]:
        """Asynchrony metrics over the wall time since the previous step ended."""
        now, busy = time.perf_counter(), self.engine.busy_seconds()
        (then, busy_then), self._mark = self._mark, (now, busy)
        trainer_s = sum(timer.seconds().get(key, 0.0) for key in ("time/update_s", "time/sync_s"))
        staleness = sample_staleness(trained, self.step - 1)
        return overlap_metrics(staleness, self.max_staleness, waited_s, busy - busy_then, trainer_s, now - then)

    # ------------------------------------------------------------------ eval and checkpoints

    async def evaluate(self) -> dict[str, float]:
        """Held-out reward, one rollout per prompt: sampled (run temperature) and greedy; the same
        pass as `rf.evaluate` (eval.py), as metrics."""
        results = await held_out_rollouts(self.cfg, self.runtime.agent, self.eval_rows, self.reward)
        return held_out_metrics(results)

    async def save_checkpoint(self) -> Path:
        with self.guard.during(self.step, "the checkpoint"):
            model, optimizer = await self.backend.checkpoint_model(), await self.backend.optimizer_state()
        saved = ckpt.save_checkpoint(
            self.run_dir,
            self.step,
            model,
            self.policy.tokenizer,
            optimizer,
            self.objects.recorded(self.cfg),  # what trained, not a default the kernel's objects replaced
            keep_last=self.cfg.grpo.keep_last,
        )
        self.guard.last_checkpoint = saved.path
        return saved.path

    # ------------------------------------------------------------------ the run

    async def run(self, on_step: StepCallback | None = None, stop_event: StopEvent | None = None) -> TrainResult:
        cfg = self.cfg.grpo
        row: dict[str, Any] = {}
        self._mark = (time.perf_counter(), self.engine.busy_seconds())
        self.steps.publish(self.step)  # asynchronous: the first steps' rollouts start now
        if cfg.eval_every and self.step == 0:
            self.metrics.write({"step": 0, **await self.evaluate()})
        bar = tqdm(total=cfg.steps, initial=self.step, desc=f"train {self.cfg.name}", unit="step")
        try:
            while self.step < cfg.steps and not (stop_event is not None and stop_event.is_set()):
                started = time.perf_counter()
                row = await self.step_once()
                if cfg.eval_every and self.step % cfg.eval_every == 0:
                    evaluated = time.perf_counter()
                    row.update(await self.evaluate())
                    row["time/eval_s"] = time.perf_counter() - evaluated
                row["time/step_s"] = time.perf_counter() - started  # now including the eval
                # The row goes to disk before the checkpoint: a crash in between re-runs the step and
                # truncate_after drops this row, so the metrics keep each step exactly once.
                self.metrics.write(row)
                if self.step == cfg.steps or (cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0):
                    await self.save_checkpoint()
                bar.update(1)
                bar.set_postfix(reward=f"{row['reward/mean']:.3f}", s=f"{row['time/step_s']:.1f}")
                if on_step is not None:
                    await maybe_await(on_step(row))
        finally:
            bar.close()
        self.tally.check(self.cfg.name)
        return TrainResult(self.run_dir, self.step, row, self.last_checkpoint)

    async def close(self) -> None:
        """Rollouts in flight are discarded (a resumed run generates them again)."""
        if self.steps is not None:
            await self.steps.close()
        with contextlib.suppress(Exception):
            self.metrics.close()
        if self.backend is not None:
            await self.backend.close()
        if self.runtime is not None:
            await self.runtime.close()


async def train(
    cfg: RunConfig,
    policy: Policy | None = None,
    on_step: StepCallback | None = None,
    stop_event: StopEvent | None = None,
    resume: bool = False,
    reward: RewardRunner | RewardFunction | Mapping[str, RewardFunction] | None = None,
    tools: ExtraTools | None = None,
    train_data: Any = None,
    eval_data: Any = None,
    trust_run_objects: bool = False,
    replace: bool = False,
    env: Any = None,
    agent: Any = None,
) -> TrainResult:
    """Run GRPO for `cfg.grpo.steps` steps (or until `stop_event.is_set()`); see the module docstring.

    reward / tools / train_data / eval_data: objects from the kernel instead of what `cfg` names
    (a reward function or dict of them, `@rf.tool` functions or a ToolSet, rows or a
    datasets.Dataset); they are kept in the run folder, so `resume=True` needs them only to change them.
    trust_run_objects: on resume, load the folder's objects even without this user's signature
    (data/objects.py: they run code; read code/reward.py first).
    replace: delete the run folder first (local or on storage) and start over.
    env: an Environment class or factory, one instance per trajectory (`rollout.env` from the kernel).
    agent: an rf.AgentProgram that plays the episodes in place of the config's Agent.
    """
    runner = reward if isinstance(reward, RewardRunner) else None
    objects = RunObjects.of(None if runner else reward, tools, train_data, eval_data, env=env, agent=agent)
    check_names(cfg, objects, resume)  # a name that resolves to nothing fails before the model loads
    if replace and not resume:
        RunFolder(cfg.run_dir).store.remove("")
    upload = upload_for(cfg, resume)  # a run on storage: trained in a local folder, copied up
    trainer = Trainer(cfg, policy, runner, objects, trust_run_objects, run_dir=upload.local if upload else None)
    try:
        await trainer.start(resume=resume)
        result = await trainer.run(after_upload(on_step, upload), stop_event)
    finally:
        await trainer.close()
        if upload is not None:
            await asyncio.to_thread(upload.push)
            upload.discard()  # everything is on storage: the local copy goes
    if upload is None:
        return result
    checkpoint = upload.stored(result.checkpoint) if result.checkpoint is not None else None
    return dataclasses.replace(result, run_dir=cfg.run_dir, checkpoint=checkpoint)


def train_sync(cfg: RunConfig, **options: Any) -> TrainResult:
    """`train` from a plain script or a notebook cell."""
    return run_sync(train(cfg, **options))
