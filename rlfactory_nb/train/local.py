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

A backend gives the loop four things: `engine` (where rollouts are generated), `update` (one step's
policy update), `sync_weights` (push the trainer's weights to the engines) and the state a checkpoint
stores (`checkpoint_model`, `optimizer_state`). `rlfactory_nb.cluster.workers.RayBackend` is the same
contract over Ray actors.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from rlfactory_nb.engines import create_engine, engine_traits
from rlfactory_nb.train.batch import TrainBatch
from rlfactory_nb.train.engine_actors import build_model
from rlfactory_nb.train.pipeline import effective_staleness
from rlfactory_nb.train.trainable import TrainingSetup
from rlfactory_nb.train.update import UpdateSettings, make_optimizer, policy_update


class LocalBackend:
    def __init__(
        self,
        cfg: Any,
        policy: Any,
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
        if reference is None and cfg.grpo.kl_coef and cfg.model.lora is not None:
            reference = self.training.reference(policy.model)  # the adapters switched off
        self.reference = reference
        self.threads = max(1, int(cfg.cluster.cpus_per_worker))
        # The update runs in its own thread, off the event loop, with the intra-op thread count set
        # there (it is per thread): see `_make_engine` for why more threads are slower on a busy CPU.
        self._executor = ThreadPoolExecutor(
            1, "LocalBackend", initializer=torch.set_num_threads, initargs=(self.threads,)
        )
        self.engine = self._make_engine(cfg)

    def _make_engine(self, cfg: Any) -> Any:
        if engine_traits(cfg.model.engine).loads == "objects":
            # One intra-op thread per reserved CPU: on a busy CPU, extra OpenMP threads spin against each
            # other (a 13.6 s rollout step took 72 s with torch's default threads; see engines/hf.py).
            return create_engine(
                cfg.model.engine,
                (self._engine_model(cfg), self.policy.tokenizer),
                seed=cfg.grpo.seed,
                num_threads=self.threads,
                compute_dtype=self.training.precision.compute,
            )
        # The engine computes in the run's compute dtype, named explicitly: vLLM's "auto" would
        # downcast a float32 checkpoint to bfloat16 on CPU (a 4e-3 logprob gap measured).
        dtype = str(self.training.precision.compute).removeprefix("torch.")
        folder = self.policy.base_path or self.policy.path  # LoRA: the base; merged weights follow
        return create_engine(cfg.model.engine, str(folder), seed=cfg.grpo.seed, dtype=dtype)

    def _engine_model(self, cfg: Any) -> torch.nn.Module:
        """The trained model itself, or (asynchronous) a copy of its weights for the engine alone."""
        if effective_staleness(cfg, self.policy.device.type, uses_ray=False)[0] == 0:
            return self.policy.model
        weights = self.training.engine_weights(self.policy.model.state_dict())
        return build_model(self.policy.model.config, weights, self.policy.device, self.training.precision.compute)

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
            await self.engine.update_weights(self.training.engine_weights(self.policy.model.state_dict()))

    async def checkpoint_model(self) -> torch.nn.Module:
        return self.policy.model

    async def optimizer_state(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    async def close(self) -> None:
        await self.engine.close()
        self._executor.shutdown(wait=False)
