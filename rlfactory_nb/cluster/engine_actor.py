"""The engine actor: one rollout engine of any registered kind in a Ray actor, started from one typed
record (`EngineStart`), for a run's engines (`rlfactory_nb.cluster.workers.RayBackend`) and the
kernel's alike (`cluster.engine(...)`, `job.engine()`: `rlfactory_nb.cluster.engines`).

The engine is made by `rlfactory_nb.engines.build.build_engine` from the record's source: a Snapshot
(model config, tokenizer, dtype; the weights travel beside it as an actor argument, so that Ray hands
the actor tensors for an ObjectRef) or a Folder, which the actor resolves on its own node (a preset
name built or found there, a checkpoint's digests checked as `Policy.load` does).

Every Generation carries the weights version the actor held when the request arrived, and each
weight update names the next (`rlfactory_nb.engines.versioned`, the one rule). A restarted actor
reports its first version, which the trainer catches (`rlfactory_nb.train.versioned_engine`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlfactory_nb.engines import weight_sync
from rlfactory_nb.engines.base import Generation, SamplingParams, context_length, engine_traits
from rlfactory_nb.engines.build import EngineSource, Folder, Snapshot, build_engine, dtype_name
from rlfactory_nb.engines.versioned import StampedEngine
from rlfactory_nb.engines.weight_sync import GroupAddress, TensorSpec
from rlfactory_nb.models.checkpoint import verify_digests
from rlfactory_nb.models.files import model_folder
from rlfactory_nb.train.backends import engine_options

if TYPE_CHECKING:
    from rlfactory_nb.config import RunConfig
    from rlfactory_nb.models.policy import Policy


@dataclass(frozen=True)
class EngineStart:
    """What an engine actor starts from, besides the weights (which travel as their own argument)."""

    kind: str
    """the engine kind (`rlfactory_nb.engines.engine_kinds()`)"""
    source: EngineSource
    seed: int = 0
    version: int | None = 0
    """the weights version it starts with (a run's step); None for a model nobody versions"""
    num_threads: int = 1
    """torch intra-op threads: one per reserved CPU (more spin against each other on a busy CPU)"""
    options: Mapping[str, Any] = field(default_factory=dict)
    """the engine's own options (HFEngine, VLLMEngine), e.g. model.engine_args"""


def actor_device() -> torch.device:
    # Ray sets CUDA_VISIBLE_DEVICES to the GPUs it gave this actor, so the first visible one is ours.
    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


class EngineActor:
    """Hosts one rollout engine (see the module docstring); run as `ray.remote(EngineActor)`."""

    def __init__(self, start: EngineStart, weights: Mapping[str, torch.Tensor] | None = None):
        threads = max(1, start.num_threads)
        torch.set_num_threads(threads)
        self.traits = engine_traits(start.kind)
        self.device = actor_device()
        options = dict(start.options)
        if self.traits.loads == "objects":
            options.setdefault("num_threads", threads)
        source = _on_this_node(start.source)
        engine = build_engine(start.kind, source, weights, self.device, seed=start.seed, **options)
        self.engine = StampedEngine(engine, start.version)
        self.kind = start.kind

    async def ready(self) -> str:
        """Answers once the engine is built; the actor's node address, for the record."""
        import ray  # here: only ever called inside a Ray actor, where ray is loaded

        return ray.util.get_node_ip_address()

    async def max_positions(self) -> int | None:
        """The engine's context length (engines/base.py `context_length`), for the kernel's handle."""
        return context_length(self.engine)

    async def described(self) -> tuple[str, Any, int | None]:
        """(kind, tokenizer, context length): what a handle attached by name needs (`attach_engine`)."""
        return self.kind, getattr(self.engine.engine, "tokenizer", None), context_length(self.engine)

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        return await self.engine.generate(prompt_ids, sampling)

    async def score(self, token_ids: list[int]) -> list[float]:
        return await self.engine.score(token_ids)

    async def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int | None = None) -> None:
        await self.engine.update_weights(state_dict, version)

    async def open_sync_group(self, address: GroupAddress, rank: int) -> None:
        if self.traits.joins_broadcast:  # the engine's own process joins, not this actor
            await self.engine.engine.open_sync_group(address, rank)
        else:
            self.sync_group = await asyncio.to_thread(weight_sync.open_group, address, rank, self.device)

    async def receive_weights(self, specs: list[TensorSpec], version: int | None = None) -> None:
        if self.traits.joins_broadcast:
            await self.engine.engine.receive_weights(specs)
            self.engine.advance(version)
        else:
            received = weight_sync.receive(self.sync_group, specs, self.device)
            await self.engine.update_weights(await asyncio.to_thread(dict, received), version)

    async def sleep(self) -> None:
        await self.engine.sleep()

    async def wake_up(self) -> None:
        await self.engine.wake_up()

    async def close(self) -> None:
        await self.engine.close()


def run_engine_start(cfg: RunConfig, policy: Policy, compute_dtype: torch.dtype, seed: int, version: int) -> EngineStart:
    """How a run's engine actors start: the hf engine from the model config and tokenizer (weights
    beside), vLLM from the policy folder (for LoRA the base's: the merged weights follow by sync),
    which every node must be able to read (a shared file system, or a hub id every node can
    download). Engines run in the run's compute dtype; one that loads a folder with model.engine_args,
    every one with the stop ids of the run's chat format (`train.backends.engine_options`)."""
    source = Snapshot(
        policy.model.config, policy.tokenizer, dtype_name(compute_dtype), str(policy.base_path or policy.path)
    )
    threads = max(1, int(cfg.cluster.cpus_per_worker))
    return EngineStart(cfg.model.engine, source, seed, version, threads, engine_options(cfg, policy.tokenizer))


def _on_this_node(source: EngineSource) -> EngineSource:
    """A Folder's name resolved on this node: a preset's folder (built here on first use), a folder
    with its checkpoint digests checked (as `Policy.load` does), or a hub id as is."""
    if not isinstance(source, Folder):
        return source
    folder = model_folder(source.path, log=lambda _: None)
    if isinstance(folder, Path):
        verify_digests(folder)
    return replace(source, path=str(folder))
