"""The one-process backend: the trainer and the rollout engine in the loop's own process, no Ray.

This is what runs on a laptop, in a notebook kernel, and under a debugger. With the `hf` engine the
engine serves the very model object being trained, so a weight "sync" has nothing to copy; a `vllm`
engine loads the policy folder and receives the trainer's weights after every update.

Asynchronous GRPO (grpo.max_staleness >= 1, on CPU) overlaps in this one process what can overlap:
the update runs in its thread while the engine generates the next steps' rollouts in its own, and
tool calls and rewards run on the event loop meanwhile. The hf engine then serves a copy of the
weights in the compute dtype (one more model in memory), synced after each update, since generating
from weights the optimizer is changing would mix versions within a token. On a GPU one process is
colocated, and the run stays synchronous (`rlfactory_nb.train.pipeline.effective_staleness`).

The backend contract is `rlfactory_nb.train.backends.Backend`; `rlfactory_nb.cluster.workers.RayBackend`
is the same contract over Ray actors.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from rlfactory_nb.config import RunConfig
from rlfactory_nb.config_distill import RUNNING_ENGINE
from rlfactory_nb.engines.base import Engine, engine_traits
from rlfactory_nb.engines.build import EngineSource, InMemory, Snapshot, build_engine, dtype_name
from rlfactory_nb.errors import ConfigError
from rlfactory_nb.models.policy import Policy
from rlfactory_nb.train.backends import engine_options, kl_reference, register_backend
from rlfactory_nb.train.batch import TrainBatch
from rlfactory_nb.train.pipeline import effective_staleness
from rlfactory_nb.train.trainable import TrainingSetup
from rlfactory_nb.train.update import UpdateSettings, make_optimizer, policy_update


@register_backend("local")
class LocalBackend:
    def __init__(
        self,
        cfg: RunConfig,
        policy: Policy,
        optimizer_state: dict[str, Any] | None = None,
        reference: torch.nn.Module | None = None,
        version: int = 0,
    ):
        self.policy = policy
        self.training = TrainingSetup.from_config(cfg, policy.device)
        self.settings = UpdateSettings.from_config(cfg, policy.device)
        self.optimizer = make_optimizer(policy.model, cfg)
        if optimizer_state is not None:
            self.optimizer.load_state_dict(optimizer_state)
        self.reference = kl_reference(cfg, self.training, policy.model, reference)
        self.threads = max(1, int(cfg.cluster.cpus_per_worker))
        # The update runs in its own thread, off the event loop, with the intra-op thread count set
        # there (it is per thread): see `_make_engine` for why more threads are slower on a busy CPU.
        self._executor = ThreadPoolExecutor(
            1, "LocalBackend", initializer=torch.set_num_threads, initargs=(self.threads,)
        )
        self.engine: Engine = self._make_engine(cfg)
        self.judge = self._make_judge(cfg)
        self.teacher = self._make_teacher(cfg)

    def _make_engine(self, cfg: RunConfig) -> Engine:
        kind, compute = cfg.model.engine, self.training.precision.compute
        options = engine_options(cfg, self.policy.tokenizer)
        if engine_traits(kind).loads == "objects":
            # One intra-op thread per reserved CPU: on a busy CPU, extra OpenMP threads spin against each
            # other (a 13.6 s rollout step took 72 s with torch's default threads; see engines/hf.py).
            source, weights = self._engine_source(cfg)
            return build_engine(
                kind, source, weights, self.policy.device,
                seed=cfg.grpo.seed, num_threads=self.threads, compute_dtype=compute, **options,
            )
        # The engine computes in the run's compute dtype, named explicitly (build_engine says why);
        # LoRA: it loads the base, and the merged weights follow by sync.
        return build_engine(kind, self._snapshot(), seed=cfg.grpo.seed, **options)

    def _make_judge(self, cfg: RunConfig) -> Engine | None:
        """The judge `reward.judge` declares, in this process (its resource keys are Ray's)."""
        judge = cfg.reward.judge
        return None if judge is None else self._serve(cfg, judge.model, judge.engine, judge.engine_args)

    def _make_teacher(self, cfg: RunConfig) -> Engine | None:
        """The distillation teacher `distill.teacher` names, in this process (train/distill.py)."""
        distill = cfg.distill
        if distill is None:
            return None
        if distill.teacher.startswith(RUNNING_ENGINE):
            raise ConfigError(
                f"distill.teacher {distill.teacher!r} names a running engine actor on the cluster: "
                "set cluster.backend: ray (this run trains in one process, without Ray)"
            )
        return self._serve(cfg, distill.teacher, distill.engine, distill.engine_args)

    def _serve(self, cfg: RunConfig, name: str, kind: str, engine_args: dict[str, Any]) -> Engine:
        """An engine of `kind` over the model `name` (a preset, a folder, a hub id) on this device."""
        model = Policy.load(name, device=str(self.policy.device), log=lambda _: None)
        threads = {"num_threads": self.threads} if engine_traits(kind).loads == "objects" else {}
        return model.engine(kind, seed=cfg.grpo.seed, **threads, **engine_args)

    def _engine_source(self, cfg: RunConfig) -> tuple[EngineSource, dict[str, torch.Tensor] | None]:
        """The trained model itself, or (asynchronous) a copy of its weights for the engine alone."""
        if effective_staleness(cfg, self.policy.device.type, uses_ray=False)[0] == 0:
            return InMemory(self.policy.model, self.policy.tokenizer), None
        return self._snapshot(), self._engine_weights()

    def _snapshot(self) -> Snapshot:
        policy = self.policy
        dtype = dtype_name(self.training.precision.compute)
        return Snapshot(policy.model.config, policy.tokenizer, dtype, str(policy.base_path or policy.path))

    def _engine_weights(self) -> dict[str, torch.Tensor]:
        return self.training.engine_weights(self.policy.model.state_dict())

    @property
    def shares_model(self) -> bool:
        """True when the engine generates with the trained model object itself (nothing to sync)."""
        return getattr(self.engine, "model", None) is self.policy.model

    async def update(self, batch: TrainBatch, step: int) -> dict[str, float]:
        update = functools.partial(
            policy_update, self.policy.model, self.optimizer, batch, self.settings, step, self.reference
        )
        return await asyncio.get_running_loop().run_in_executor(self._executor, update)

    async def sync_weights(self, version: int | None = None) -> None:
        """Push the weights to the engine (nothing to do when it serves the trained model itself)."""
        if not self.shares_model:
            await self.engine.update_weights(self._engine_weights(), version)

    async def checkpoint_model(self) -> torch.nn.Module:
        return self.policy.model

    async def optimizer_state(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def actors(self) -> dict[str, Any]:
        return {}  # one process: nothing can die apart from it

    async def close(self) -> None:
        await self.engine.close()
        for served in (self.judge, self.teacher):
            if served is not None:
                await served.close()
        self._executor.shutdown(wait=False)
