"""Training on Ray: policy workers in one torch.distributed group, and rollout engine actors.

    controller (the loop, tools, rewards)
      |- PolicyWorker x num_workers   one process group, gloo (CPU) or NCCL (GPU); DDP (a full copy
      |                               each) or FSDP (sharded), see `rlfactory_nb.train.parallel`; each
      |                               trains on its slice of every mini-batch
      |- EngineActor x num_engines    an hf or vLLM engine each; rollouts are spread over them
      |- the judge's EngineActor      with reward.judge: its own CPUs and GPUs, the rewards' engine
      '- the teacher's EngineActor    with distill: its own CPUs and GPUs, scoring the rows (train/distill.py)

Across nodes the workers go in one placement group packed onto as few nodes as fit, the engines in
one spread over them (`rlfactory_nb.cluster.placement`); where each actor landed is printed when the
backend starts and kept as `RayBackend.placement`.

Weight sync, after each update (cluster.weight_sync):
    object_store  worker 0 puts its full state dict in the Ray object store once and every engine
                  reads it from there; the weights never pass through the controller. Works anywhere.
    broadcast     worker 0 broadcasts each tensor to the engines in a process group of their own
                  (NCCL on GPU: device to device, once), see `rlfactory_nb.engines.weight_sync`.
With cluster.colocate the engines sleep during the update (vLLM frees its weights and KV cache; an hf
engine moves its model to host memory) and wake before the sync, so both can use the same GPUs.

`RayBackend` has the contract of `rlfactory_nb.train.backends.Backend`, as `LocalBackend` does, so
`train/loop.py` runs the same with either; it registers as backend "ray". Ray is imported only here
(and in `rlfactory_nb.cluster`), and only when used.
"""

from __future__ import annotations

import asyncio
import math
import os
from datetime import timedelta
from typing import Any

import torch

from rlfactory_nb.cluster.engine_actor import EngineActor, actor_device, run_engine_start
from rlfactory_nb.cluster.engines import ClusterEngine, attach_engine, start_engine
from rlfactory_nb.cluster.placement import Placement, locate, reserve
from rlfactory_nb.cluster.ray_cluster import join, start_local
from rlfactory_nb.config import RunConfig
from rlfactory_nb.config_cluster import ClusterConfig
from rlfactory_nb.config_distill import RUNNING_ENGINE
from rlfactory_nb.engines import engine_traits, weight_sync
from rlfactory_nb.engines.build import build_model, cpu_state
from rlfactory_nb.engines.weight_sync import GroupAddress, TensorSpec
from rlfactory_nb.models.policy import Policy
from rlfactory_nb.train import parallel
from rlfactory_nb.train.backends import kl_reference, register_backend
from rlfactory_nb.train.batch import TrainBatch
from rlfactory_nb.train.failures import is_actor_death
from rlfactory_nb.train.trainable import TrainingSetup
from rlfactory_nb.train.update import UpdateSettings, make_optimizer, policy_update


def init_ray(cluster: ClusterConfig, extra_cpus: float = 0.0) -> Any:
    """Connect to `cluster.address`, or start a local Ray sized for the workers and engines, listening
    on 127.0.0.1 only and never joining a stale cluster found through /tmp/ray files."""
    import ray

    if ray.is_initialized():
        return ray
    if cluster.address is not None:
        join(cluster.address)
        return ray
    needed = (cluster.num_workers + cluster.num_engines) * cluster.cpus_per_worker + extra_cpus
    # Ray gives its raylet 30 s to register; a busy 2-core machine (CI, a notebook running a job) can
    # take longer, and then the whole run fails at start.
    os.environ.setdefault("RAY_raylet_start_wait_time_s", "120")
    start_local(
        num_cpus=max(2, math.ceil(needed)),
        object_store_memory=int(cluster.object_store_memory_gb * 2**30),
        include_dashboard=False,
    )
    return ray


class PolicyWorker:
    """One rank: its part of the policy, its optimizer, and (with kl_coef) the reference model."""

    def __init__(self, rank: int, world_size: int, cfg: RunConfig, num_threads: int = 1):
        self.rank, self.world_size, self.cfg = rank, world_size, cfg
        self.strategy = cfg.cluster.strategy
        self.device = actor_device()
        self.settings = UpdateSettings.from_config(cfg, self.device)
        self.training = TrainingSetup.from_config(cfg, self.device)
        torch.set_num_threads(max(1, num_threads))

    def rendezvous(self) -> tuple[str, int]:
        """A free address on this worker's node for a process group (called on rank 0)."""
        import ray

        host = ray.util.get_node_ip_address()
        return host, weight_sync.free_port(host)

    def setup(
        self,
        address: tuple[str, int],
        model_config: Any,
        weights: dict[str, torch.Tensor],
        optimizer_state: dict[str, Any] | None,
        reference_weights: dict[str, torch.Tensor] | None,
    ) -> None:
        """Join the process group (blocks until every rank joins) and build the model and optimizer."""
        import torch.distributed as dist

        host, port = address
        dist.init_process_group(
            "nccl" if self.device.type == "cuda" else "gloo",
            store=weight_sync.open_store(host, port, self.world_size, self.rank),  # on `host` only
            rank=self.rank,
            world_size=self.world_size,
            timeout=timedelta(minutes=5),
        )
        # The same model the driver's Trainer prepared (dtypes, LoRA), then its exact weights.
        module = self.training.prepare(build_model(model_config, None, torch.device("cpu")))
        module.load_state_dict(weights)
        module.to(self.device)
        precision = self.training.precision
        self.model = parallel.wrap(module, self.strategy, self.world_size, self.device, precision)
        self.optimizer = make_optimizer(self.model, self.cfg)  # after sharding: FSDP's DTensor params
        if optimizer_state is not None:
            parallel.load_optimizer_state(self.model, self.optimizer, optimizer_state)
        reference = None
        if reference_weights is not None:
            reference = build_model(model_config, reference_weights, self.device, precision.compute)
            reference = parallel.shard_reference(reference.requires_grad_(False), self.strategy, precision)
        self.reference = kl_reference(self.cfg, self.training, self.model, reference)

    def update(self, batch: TrainBatch, step: int) -> dict[str, float]:
        return policy_update(
            self.model, self.optimizer, batch, self.settings, step, self.reference, self.rank, self.world_size
        )

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The full weights on CPU (every rank must call it under FSDP; rank 0 gets them)."""
        return parallel.full_state_dict(self.model)

    def engine_state(self) -> dict[str, torch.Tensor]:
        """The weights as engines load them (adapters merged, compute dtype); a collective like
        `state_dict`."""
        return self.training.engine_weights(parallel.full_state_dict(self.model))

    def optimizer_state(self) -> dict[str, Any]:
        """Plain torch layout (every rank must call it under FSDP; rank 0's is the whole state)."""
        return parallel.optimizer_state(self.model, self.optimizer)

    def open_sync_group(self, address: GroupAddress) -> None:
        """Join the weight-broadcast group as its sender, rank 0 there too (called on rank 0)."""
        self.sync_group = weight_sync.open_group(address, 0, self.device)

    def send_weights(self) -> None:
        """Every rank gathers (a collective under FSDP); rank 0 broadcasts to the engines."""
        full = parallel.full_state_dict(self.model, on_cpu=self.device.type == "cpu")
        if self.rank == 0:
            weight_sync.send(self.sync_group, self.training.engine_weights(full), self.device)

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


@register_backend("ray")
class RayBackend:
    """`num_workers` PolicyWorkers (one DDP or FSDP group) and `num_engines` EngineActors on Ray."""

    def __init__(
        self,
        cfg: RunConfig,
        policy: Policy,
        optimizer_state: dict[str, Any] | None = None,
        reference: torch.nn.Module | None = None,
        version: int = 0,
    ):
        cluster = self.cluster = cfg.cluster.layout()
        ray = init_ray(cluster, sum(served.num_cpus for served in (cfg.reward.judge, cfg.distill) if served is not None))
        # the judge and the teacher first: a model that cannot be placed fails the run before the workers start
        self.judge = start_judge(cfg)
        self.teacher = start_teacher(cfg)
        self.policy = policy
        self._ray = ray
        threads = max(1, int(cluster.cpus_per_worker))
        self.reservation = reserve(ray, cluster)  # placement groups: workers PACK, engines SPREAD
        worker_device = torch.device("cuda" if cluster.gpus_per_worker > 0 else "cpu")
        training = TrainingSetup.from_config(cfg, worker_device)
        state = cpu_state(policy.model)
        weights = ray.put(state)
        reference_weights = ray.put(cpu_state(reference)) if reference is not None else None
        self.workers = [
            ray.remote(PolicyWorker)
            .options(**self.reservation.worker_options(rank))
            .remote(rank, cluster.num_workers, cfg, threads)
            for rank in range(cluster.num_workers)
        ]
        address = ray.get(self.workers[0].rendezvous.remote())
        config = policy.model.config
        ray.get(
            [
                w.setup.remote(address, config, weights, optimizer_state, reference_weights)
                for w in self.workers
            ]
        )
        # hf actors start from these weights; vLLM reads the folder (for LoRA the base: see Trainer.start)
        loads_weights = engine_traits(cfg.model.engine).loads == "objects"
        engine_weights = ray.put(training.engine_weights(state)) if loads_weights else None
        compute = training.precision.compute
        engines = [
            ray.remote(EngineActor)
            .options(**self.reservation.engine_options(index))
            .remote(run_engine_start(cfg, policy, compute, cfg.grpo.seed + index, version), engine_weights)
            for index in range(cluster.num_engines)
        ]
        self.engine = ClusterEngine(engines, f"run {cfg.name}", cfg.model.engine, policy.tokenizer, version)
        self.broadcast = cluster.weight_sync == "broadcast" or (
            cluster.weight_sync == "auto" and cluster.gpus_per_worker > 0
        )
        self._specs: list[TensorSpec] | None = None
        self.placement: Placement = locate(ray, self.actors(), self.reservation.plans)
        """where the trainer and each actor run, by the role `actors()` names it"""
        print(self.placement, flush=True)  # a job's driver writes it to job.log

    async def update(self, batch: TrainBatch, step: int) -> dict[str, float]:
        if self.cluster.colocate:
            await self.engine.sleep()  # the update gets the GPU memory the engines held
        shared = self._ray.put(batch)  # one copy in the object store, read by every worker
        per_rank = await all_ranks(*(worker.update.remote(shared, step) for worker in self.workers))
        return merge_rank_metrics(per_rank)

    async def sync_weights(self, version: int | None = None) -> None:
        """Push the trainer's weights to every engine, as weights `version` (None: the next). Requests
        in flight are not drained: each engine takes the weights between two of its batches."""
        if self.cluster.colocate:
            await self.engine.wake_up()
        if self.broadcast:
            await self._broadcast_weights(version)
            return
        states = [worker.engine_state.remote() for worker in self._gatherers()]
        await all_ranks(self.engine.update_weights(states[0], version), *states[1:])

    async def _broadcast_weights(self, version: int | None) -> None:
        if self._specs is None:  # once: the group, and the tensor list every receiver allocates from
            self._specs = weight_sync.specs_of(await self._rank0("engine_state"))
            host, port = await self.workers[0].rendezvous.remote()
            address = GroupAddress(host, port, world_size=1 + len(self.engine.actors))
            await asyncio.gather(
                self.workers[0].open_sync_group.remote(address),
                *(actor.open_sync_group.remote(address, 1 + i) for i, actor in enumerate(self.engine.actors)),
            )
        await all_ranks(
            *(worker.send_weights.remote() for worker in self._gatherers()),
            *(actor.receive_weights.remote(self._specs, version) for actor in self.engine.actors),
        )

    async def worker_states(self) -> list[dict[str, torch.Tensor]]:
        """Every worker's full weights (under FSDP only rank 0's is filled)."""
        return list(await asyncio.gather(*(worker.state_dict.remote() for worker in self.workers)))

    async def checkpoint_model(self) -> torch.nn.Module:
        self.policy.model.load_state_dict(await self._rank0("state_dict"))
        return self.policy.model

    async def optimizer_state(self) -> dict[str, Any]:
        return await self._rank0("optimizer_state")

    def actors(self) -> dict[str, Any]:
        workers = self.workers
        named = {f"policy worker {rank} of {len(workers)}": worker for rank, worker in enumerate(workers)}
        named.update({f"engine actor {index}": actor for index, actor in enumerate(self.engine.actors)})
        if self.judge is not None:
            named.update({f"judge engine actor {self.judge.name}": actor for actor in self.judge.actors})
        if self.teacher is not None:
            named.update({f"teacher engine actor {self.teacher.name}": actor for actor in self.teacher.actors})
        return named

    async def _rank0(self, method: str) -> Any:
        """Rank 0's result of `method` (called on every rank where it is a collective)."""
        results = await all_ranks(*(getattr(worker, method).remote() for worker in self._gatherers()))
        return results[0]

    def _gatherers(self) -> list[Any]:
        """The workers that must take part in reading full weights or optimizer state: all of them
        under FSDP (gathering shards is a collective), only rank 0 under DDP (it holds everything)."""
        return self.workers if self.cluster.strategy == "fsdp" else self.workers[:1]

    async def close(self) -> None:
        await self.engine.close()  # kills the engine actors too
        for served in (self.judge, self.teacher):
            if served is not None:
                await served.close()
        await asyncio.gather(*(worker.close.remote() for worker in self.workers), return_exceptions=True)
        for worker in self.workers:
            self._ray.kill(worker)
        self.reservation.remove()


async def all_ranks(*calls: Any) -> list[Any]:
    """Every call's result. When some fail, the error of an actor that died wins over the others: a
    surviving rank's collective fails first (gloo's "Connection reset by peer"), before Ray reports
    its peer dead, and the dead one is what a person can act on (train/failures.py names it)."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    errors = [result for result in results if isinstance(result, BaseException)]
    if errors:
        raise next((error for error in errors if is_actor_death(error)), errors[0])
    return list(results)


def start_judge(cfg: RunConfig) -> ClusterEngine | None:
    """The engine actor of the judge `reward.judge` declares, on its own resources; None without one."""
    judge = cfg.reward.judge
    if judge is None:
        return None
    return start_engine(
        judge.model, judge.engine, num_gpus=judge.num_gpus, num_cpus=judge.num_cpus,
        seed=cfg.grpo.seed, label="judge", **judge.engine_args,
    )  # fmt: skip


def start_teacher(cfg: RunConfig) -> ClusterEngine | None:
    """The engine actor of the distillation teacher `distill.teacher` names, on its own resources, or
    the running one it names (`engine:NAME`, left running); None without one (train/distill.py)."""
    distill = cfg.distill
    if distill is None:
        return None
    if distill.teacher.startswith(RUNNING_ENGINE):
        return attach_engine(distill.teacher.removeprefix(RUNNING_ENGINE))
    return start_engine(
        distill.teacher, distill.engine, num_gpus=distill.num_gpus, num_cpus=distill.num_cpus,
        seed=cfg.grpo.seed, label="teacher", **distill.engine_args,
    )  # fmt: skip


SUMMED = ("train/tokens", "train/padding_tokens", "train/oversized_sequences")
"""per-rank counts (see `rlfactory_nb.train.update`), added up over the ranks"""


def merge_rank_metrics(per_rank: list[dict[str, float]]) -> dict[str, float]:
    """One metrics row from every rank's: means, except counts (`SUMMED`: each rank saw its own
    slice) and `_max` keys (the largest).

    >>> merge_rank_metrics([{"train/loss": 1.0, "train/tokens": 3, "train/gap_max": 2.0},
    ...                     {"train/loss": 3.0, "train/tokens": 4}])
    {'train/loss': 2.0, 'train/tokens': 7, 'train/gap_max': 2.0}
    """
    merged: dict[str, float] = {}
    for key in dict.fromkeys(key for metrics in per_rank for key in metrics):
        values = [metrics[key] for metrics in per_rank if key in metrics]
        if key in SUMMED:
            merged[key] = sum(values)
        elif key.endswith("_max"):
            merged[key] = max(values)
        else:
            merged[key] = sum(values) / len(values)
    return merged
