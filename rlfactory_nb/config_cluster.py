"""The `cluster` section of a RunConfig: how many policy workers and engines, their CPUs and GPUs,
the Ray cluster, and the custom resources that pin them to nodes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from rlfactory_nb.config_schema import (
    NonEmptyStr,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
)


@dataclass(frozen=True)
class ClusterConfig:
    address: NonEmptyStr | None = None
    """None: start a local Ray; "auto" or "ray://host:10001": connect"""
    num_workers: PositiveInt = 1
    """policy workers (one torch.distributed rank each)"""
    num_engines: PositiveInt = 1
    """rollout engine actors (data-parallel rollouts)"""
    cpus_per_worker: PositiveFloat = 1.0
    """CPUs reserved per policy worker or engine"""
    gpus_per_worker: NonNegativeFloat = 0.0
    """GPUs per policy worker or engine (0 on CPU)"""
    num_gpus: NonNegativeInt = 0
    """GPUs to use in all, a shorthand for the three keys above (see `ClusterConfig.layout`)"""
    colocate: bool = False
    """engines and trainer time-share the GPUs: vLLM engines sleep (free their weights and KV cache)
    during each update and wake for the next rollout; needs model.engine=vllm on GPUs"""
    strategy: Literal["ddp", "fsdp"] = "ddp"
    """how policy workers split the training: "ddp" a full copy each; "fsdp" weights, gradients and
    optimizer state sharded over the workers (for models whose training state outgrows one GPU)"""
    weight_sync: Literal["auto", "object_store", "broadcast"] = "auto"
    """how new weights reach the engine actors: through the Ray object store, or a broadcast from
    worker 0 in a process group with the engines (NCCL on GPU, gloo on CPU); "auto": broadcast on GPU"""
    object_store_memory_gb: PositiveFloat = 1.0
    """Ray object store size of the local Ray that `launch` or `train_sync` starts (an existing cluster keeps its own)"""
    backend: Literal["auto", "local", "ray"] = "auto"
    """"local": trainer and engine in this process, no Ray (for debugging); "ray": policy workers and
    engine actors on Ray; "auto": Ray when num_workers, num_engines or num_gpus > 1 or an address is
    given"""
    driver_resources: dict[str, float] = field(default_factory=dict)
    """custom Ray resources the training driver asks for, which pin it to the nodes that offer them
    (`ray start --resources='{"trainer": 1}'` on a node, `{trainer: 1}` here); empty: any node"""
    worker_resources: dict[str, float] = field(default_factory=dict)
    """custom Ray resources each policy worker asks for, in its placement group bundle (the workers'
    group is PACKed: onto one node where they fit, for NCCL); empty: any node"""
    engine_resources: dict[str, float] = field(default_factory=dict)
    """custom Ray resources each engine actor asks for, in its bundle (the engines' group is SPREAD
    over the nodes that offer them); empty: any node"""

    def field_problems(self) -> list[tuple[str, str]]:
        """Rules the builder reports like a range: (field, problem and fix).

        >>> ClusterConfig(worker_resources={"GPU": 1}, engine_resources={"node3": 0}).field_problems()
        [('worker_resources', "'GPU' is Ray's own: set cluster.gpus_per_worker or cluster.num_gpus instead"), ('engine_resources', "'node3': the amount must be a number >= 0.0001, got 0")]
        """
        problems = []
        for key in ("driver_resources", "worker_resources", "engine_resources"):
            problems.extend((key, problem) for problem in self._resource_problems(getattr(self, key)))
        return problems

    @staticmethod
    def _resource_problems(resources: dict[str, Any]) -> list[str]:
        """What Ray would refuse in a custom resource request (its own resources, tiny amounts)."""
        own = {"CPU": "cpus_per_worker", "GPU": "gpus_per_worker or cluster.num_gpus"}
        problems = []
        for name, amount in resources.items():
            if not isinstance(name, str) or not name.strip():
                problems.append(f"resource names must be non-empty strings, got {name!r}")
            elif name in (*own, "memory", "object_store_memory"):
                fix = f"set cluster.{own[name]} instead" if name in own else "Ray sizes it itself"
                problems.append(f"{name!r} is Ray's own: {fix}")
            elif type(amount) not in (int, float) or not 1e-4 <= amount < float("inf"):  # NaN fails too
                problems.append(f"{name!r}: the amount must be a number >= 0.0001, got {amount!r}")
        return problems

    def layout(self) -> ClusterConfig:
        """The cluster with `num_gpus` spelled out: half the GPUs train and half generate, one each
        (an odd GPU goes to training); with `colocate`, or a single GPU, a worker and an engine share
        each GPU (0.5 each, the engine sleeping during updates). Without num_gpus: unchanged.

        >>> c = ClusterConfig(num_gpus=8).layout()
        >>> c.num_workers, c.num_engines, c.gpus_per_worker, c.colocate
        (4, 4, 1.0, False)
        >>> c = ClusterConfig(num_gpus=1).layout()
        >>> c.num_workers, c.num_engines, c.gpus_per_worker, c.colocate
        (1, 1, 0.5, True)
        """
        if self.num_gpus <= 0:
            return self
        if self.colocate or self.num_gpus == 1:
            shape = {"num_workers": self.num_gpus, "num_engines": self.num_gpus, "gpus_per_worker": 0.5}
            return dataclasses.replace(self, colocate=True, **shape)
        engines = self.num_gpus // 2
        shape = {"num_workers": self.num_gpus - engines, "num_engines": engines, "gpus_per_worker": 1.0}
        return dataclasses.replace(self, **shape)
