"""Rollout engine actors on Ray: one hf or vLLM engine each, and `RayEngine`, the engine contract
over all of them (requests round-robin, weight updates, sleep and wake to every actor).

Used by `rlfactory_nb.cluster.workers.RayBackend`; see its docstring for the picture.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from typing import Any

import torch

from rlfactory_nb.engines import Generation, SamplingParams, create_engine, engine_traits, weight_sync
from rlfactory_nb.engines.weight_sync import GroupAddress, TensorSpec


def cpu_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().cpu() for name, tensor in module.state_dict().items()}


def build_model(
    model_config: Any,
    weights: dict[str, torch.Tensor] | None,
    device: torch.device,
    dtype: torch.dtype | None = None,
) -> torch.nn.Module:
    """A transformers model from its config, with `weights` when given, on `device` (in `dtype`)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(model_config)
    if weights is not None:
        model.load_state_dict(weights)
    return model.to(device=device, dtype=dtype).eval()


def actor_device() -> torch.device:
    # Ray sets CUDA_VISIBLE_DEVICES to the GPUs it gave this actor, so the first visible one is ours.
    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


class EngineActor:
    """Hosts one rollout engine of any registered kind: one made from objects (hf) gets its own copy
    of the policy built from weights; one that loads a folder (vLLM) gets the policy folder.

    `version`: the weights version it starts with (the trainer's step); each weight update names the
    next, and every Generation reports the version its request arrived under (a restarted actor
    reports its first one, which the trainer catches: `rlfactory_nb.train.versioned_engine`)."""

    def __init__(
        self,
        kind: str,
        policy_files: dict[str, Any],
        weights: dict[str, torch.Tensor] | None,
        seed: int,
        num_threads: int = 1,
        version: int = 0,
    ):
        torch.set_num_threads(max(1, num_threads))
        self.version = version
        self.traits = engine_traits(kind)
        self.device = actor_device()
        dtype = getattr(torch, policy_files["dtype"])
        if self.traits.loads == "objects":
            model = build_model(policy_files["config"], weights, self.device, dtype)
            objects = (model, policy_files["tokenizer"])
            self.engine: Any = create_engine(kind, objects, seed=seed, num_threads=max(1, num_threads))
        else:
            options = {"dtype": policy_files["dtype"], "seed": seed, **policy_files["engine_args"]}
            self.engine = create_engine(kind, policy_files["path"], **options)

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        version = self.version
        generation = await self.engine.generate(prompt_ids, sampling)
        return dataclasses.replace(generation, policy_version=version)

    async def update_weights(self, state_dict: dict[str, torch.Tensor], version: int | None = None) -> None:
        await self.engine.update_weights(state_dict)
        self.version = self.version + 1 if version is None else version

    async def open_sync_group(self, address: GroupAddress, rank: int) -> None:
        if self.traits.joins_broadcast:  # the engine's own process joins, not this actor
            await self.engine.open_sync_group(address, rank)
        else:
            self.sync_group = await asyncio.to_thread(weight_sync.open_group, address, rank, self.device)

    async def receive_weights(self, specs: list[TensorSpec], version: int | None = None) -> None:
        if self.traits.joins_broadcast:
            await self.engine.receive_weights(specs)
        else:
            received = weight_sync.receive(self.sync_group, specs, self.device)
            await self.engine.update_weights(await asyncio.to_thread(dict, received))
        self.version = self.version + 1 if version is None else version

    async def sleep(self) -> None:
        await self.engine.sleep()

    async def wake_up(self) -> None:
        await self.engine.wake_up()

    async def close(self) -> None:
        await self.engine.close()


class RayEngine:
    """The engine contract over engine actors: requests go round-robin, weight updates to all."""

    def __init__(self, actors: list[Any], stop_token_ids: tuple[int, ...]):
        self.actors = actors
        self._stop_token_ids = stop_token_ids
        self._next = itertools.cycle(actors)

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        return self._stop_token_ids

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        return await next(self._next).generate.remote(list(prompt_ids), sampling)

    async def update_weights(self, state_dict: Any, version: int | None = None) -> None:
        """`state_dict`: tensors, or an ObjectRef to them (then engines read it from the object store);
        `version`: the weights version it is (None: each actor's next)."""
        import ray

        reference = state_dict if isinstance(state_dict, ray.ObjectRef) else ray.put(state_dict)
        await self._all("update_weights", reference, version)

    async def sleep(self) -> None:
        await self._all("sleep")

    async def wake_up(self) -> None:
        await self._all("wake_up")

    async def close(self) -> None:
        await asyncio.gather(*(actor.close.remote() for actor in self.actors), return_exceptions=True)

    async def _all(self, method: str, *args: Any) -> None:
        await asyncio.gather(*(getattr(actor, method).remote(*args) for actor in self.actors))


def policy_files(cfg: Any, policy: Any, compute_dtype: torch.dtype) -> dict[str, Any]:
    """What an engine actor builds its engine from, besides the weights: the hf engine the model
    config and tokenizer; vLLM the policy folder (for LoRA the base's: the merged weights follow by
    sync), which every node must be able to read (a shared file system, or a hub id every node can
    download). Engines run in the run's compute dtype."""
    return {
        "config": policy.model.config,
        "tokenizer": policy.tokenizer,
        "path": str(policy.base_path or policy.path),
        "dtype": str(compute_dtype).removeprefix("torch."),
        "engine_args": _engine_args(cfg),
    }


def _engine_args(cfg: Any) -> dict[str, Any]:
    """model.engine_args, plus what colocation needs from the engine unless the user says otherwise."""
    args = dict(cfg.model.engine_args)
    if cfg.cluster.layout().colocate:
        for key, value in engine_traits(cfg.model.engine).colocated_options.items():
            args.setdefault(key, value)
    return args
