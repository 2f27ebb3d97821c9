"""Which backend runs a run's updates and engines: one process (`LocalBackend`) or Ray workers and
engine actors (`RayBackend`), as `cluster.backend` says; and the check that `model.engine` names a
registered engine kind, made before anything starts."""

from __future__ import annotations

from typing import Any

import torch

from rlfactory_nb.config import RunConfig
from rlfactory_nb.config_schema import ConfigError
from rlfactory_nb.models.policy import Policy


def make_backend(
    cfg: RunConfig,
    policy: Policy,
    optimizer_state: dict[str, Any] | None,
    reference: torch.nn.Module | None,
    version: int = 0,
) -> Any:
    """The local backend (one process) or Ray workers, as cluster.backend says (see ClusterConfig);
    its engines start with weights `version` (the step the run starts from)."""
    if uses_ray(cfg):
        from rlfactory_nb.cluster.workers import RayBackend

        return RayBackend(cfg, policy, optimizer_state, reference, version)
    from rlfactory_nb.train.local import LocalBackend

    return LocalBackend(cfg, policy, optimizer_state, reference, version)


def check_engine_kind(kind: str) -> None:
    """model.engine names a registered engine (`rlfactory_nb.engines.register_engine`)."""
    from rlfactory_nb.engines import engine_traits

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
