"""The backend contract, and which backend runs a run's updates and engines: one process
(`LocalBackend`, "local") or Ray workers and engine actors (`RayBackend`, "ray"), as `cluster.backend`
says; and the check that `model.engine` names a registered engine kind, made before anything starts.

A backend gives the loop five things: `engine` (where rollouts are generated), `update` (one step's
policy update), `sync_weights` (push the trainer's weights to the engines), the state a checkpoint
stores (`checkpoint_model`, `optimizer_state`), and `close`; and the judge's and the distillation
teacher's engines, when the config declares them (`reward.judge`, `distill.teacher`: an engine actor
of its own on Ray, in-process locally). Both backends are registered by name
(`register_backend`) and their modules loaded by name when a run asks for them: the Ray backend lives
in `rlfactory_nb.cluster` (layer 5), above this one, which may not import it (docs/decisions.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol

import torch

from rlfactory_nb.config import RunConfig
from rlfactory_nb.engines.base import Engine, engine_traits, stop_token_ids_from_tokenizer
from rlfactory_nb.errors import ConfigError, RegistryKeyError
from rlfactory_nb.models.policy import Policy
from rlfactory_nb.train.batch import TrainBatch
from rlfactory_nb.train.trainable import TrainingSetup


def engine_options(cfg: RunConfig, tokenizer: Any) -> dict[str, Any]:
    """What a run's engine is built with besides its source, for both backends: the stop ids of the
    family `rollout.chat_format` names (an explicit family, not only `auto`, sets the engine's stop
    set), and for an engine that loads a folder `model.engine_args`, plus what colocation needs from
    it unless the user says otherwise (e.g. vLLM's sleep mode)."""
    options: dict[str, Any] = {"stop_token_ids": stop_token_ids_from_tokenizer(tokenizer, cfg.rollout.chat_format)}
    if engine_traits(cfg.model.engine).loads == "folder":
        args = dict(cfg.model.engine_args)
        if cfg.cluster.layout().colocate:
            for key, value in engine_traits(cfg.model.engine).colocated_options.items():
                args.setdefault(key, value)
        options.update(args)
    return options


class Backend(Protocol):
    """What the training loop runs its updates and engines on."""

    policy: Policy
    """the driver's policy: its tokenizer for the agent, its model what `checkpoint_model` fills"""
    judge: Engine | None
    """the engine of the judge `reward.judge` declares, started and closed with the backend; None without one"""
    teacher: Engine | None
    """the distillation teacher's engine `distill.teacher` names (train/distill.py), started and closed
    with the backend; None without one"""

    @property
    def engine(self) -> Engine:
        """Where rollouts are generated (wrapped by the loop in a `VersionedEngine`)."""
        ...

    async def update(self, batch: TrainBatch, step: int) -> dict[str, float]:
        """One step's policy update; its metrics row."""
        ...

    async def sync_weights(self, version: int | None = None) -> None:
        """Push the trainer's weights to the engines, as weights `version` (None: the next)."""
        ...

    async def checkpoint_model(self) -> torch.nn.Module:
        """The model with the trained weights, as a checkpoint writes it."""
        ...

    async def optimizer_state(self) -> dict[str, Any]:
        """The optimizer's state in plain torch layout."""
        ...

    def actors(self) -> dict[str, Any]:
        """The Ray actors it runs on, by the role an error names them with (none for one process)."""
        ...

    async def close(self) -> None:
        ...


BackendFactory = Callable[[RunConfig, Policy, "dict[str, Any] | None", "torch.nn.Module | None", int], Backend]
"""(cfg, policy, optimizer_state, reference, version) -> Backend; every backend's constructor"""

BACKEND_MODULES = {"local": "rlfactory_nb.train.local", "ray": "rlfactory_nb.cluster.workers"}
"""the module that registers each backend, imported by name when a run first asks for it"""
_BACKENDS: dict[str, BackendFactory] = {}


def register_backend(name: str) -> Callable[[BackendFactory], BackendFactory]:
    """Register a backend class (or factory) under `name`."""

    def decorate(factory: BackendFactory) -> BackendFactory:
        _BACKENDS[name] = factory
        return factory

    return decorate


def backend_factory(name: str) -> BackendFactory:
    if name not in _BACKENDS and name in BACKEND_MODULES:
        importlib.import_module(BACKEND_MODULES[name])
    if name not in _BACKENDS:
        raise RegistryKeyError(f"unknown backend {name!r}; choose one of {sorted({*BACKEND_MODULES, *_BACKENDS})}")
    return _BACKENDS[name]


def make_backend(
    cfg: RunConfig,
    policy: Policy,
    optimizer_state: dict[str, Any] | None,
    reference: torch.nn.Module | None,
    version: int = 0,
) -> Backend:
    """The local backend (one process) or Ray workers, as cluster.backend says (see ClusterConfig);
    its engines start with weights `version` (the step the run starts from)."""
    factory = backend_factory("ray" if uses_ray(cfg) else "local")
    return factory(cfg, policy, optimizer_state, reference, version)


def kl_reference(
    cfg: RunConfig, training: TrainingSetup, model: torch.nn.Module, reference: torch.nn.Module | None = None
) -> torch.nn.Module | None:
    """The KL reference a backend trains against: the one given (a full fine-tune's frozen start);
    else, with grpo.kl_coef under LoRA, the trained `model` with its adapters switched off (no copy)."""
    if reference is None and cfg.grpo.kl_coef and training.lora is not None:
        return training.reference(model)
    return reference


def check_engine_kind(kind: str) -> None:
    """model.engine names a registered engine (`rlfactory_nb.engines.register_engine`)."""
    try:
        engine_traits(kind)
    except ValueError as error:
        raise ConfigError([f"model.engine: {error}"]) from None


def uses_ray(cfg: RunConfig) -> bool:
    cluster = cfg.cluster.layout()
    return cluster.backend == "ray" or (
        cluster.backend == "auto"
        and (cluster.num_workers > 1 or cluster.num_engines > 1 or cluster.address is not None)
    )
