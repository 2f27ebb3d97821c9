"""Training on Ray: policy workers in one torch.distributed group, and rollout engine actors.

    controller (the loop, tools, rewards)
      |- PolicyWorker x num_workers   DDP over gloo (CPU) or NCCL (GPU); each trains on its slice of
      |                               every mini-batch, gradients all-reduced, so weights stay equal
      '- EngineActor x num_engines    an hf engine each; rollouts are spread over them round-robin

Weight sync: worker 0 puts its state dict in the Ray object store once, and every engine actor reads
it from there; the weights never pass through the controller. On GPU a collective broadcast would
be faster; the object store is the path that works everywhere.

`RayBackend` has the contract of `rlfactory_nb.train.local.LocalBackend`, so `train/loop.py` runs the
same with either. Ray is imported only here (and in `rlfactory_nb.cluster`), and only when used.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import socket
from datetime import timedelta
from typing import Any

import torch

from rlfactory_nb.engines.base import Generation, SamplingParams, stop_token_ids_from_tokenizer
from rlfactory_nb.train.batch import TrainBatch
from rlfactory_nb.train.update import UpdateSettings, make_optimizer, policy_update


def init_ray(cluster: Any) -> Any:
    """Connect to `cluster.address`, or start a local Ray sized for the workers and engines."""
    import ray

    if ray.is_initialized():
        return ray
    if cluster.address is not None:
        ray.init(address=cluster.address)
        return ray
    needed = (cluster.num_workers + cluster.num_engines) * cluster.cpus_per_worker
    ray.init(
        address="local",  # never join a stale cluster found through /tmp/ray files
        num_cpus=max(2, math.ceil(needed)),
        object_store_memory=int(cluster.object_store_memory_gb * 2**30),
        include_dashboard=False,
    )
    return ray


def _cpu_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().cpu() for name, tensor in module.state_dict().items()}


def _build_model(
    model_config: Any, weights: dict[str, torch.Tensor], device: torch.device
) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(model_config)
    model.load_state_dict(weights)
    return model.to(device).eval()


def _worker_device() -> torch.device:
    # Ray sets CUDA_VISIBLE_DEVICES to the GPUs it gave this actor, so the first visible one is ours.
    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


class PolicyWorker:
    """One rank: a copy of the policy, its optimizer, and (with kl_coef) the reference model."""

    def __init__(self, rank: int, world_size: int, cfg: Any, num_threads: int = 1):
        self.rank, self.world_size, self.cfg = rank, world_size, cfg
        self.settings = UpdateSettings.from_config(cfg)
        torch.set_num_threads(max(1, num_threads))

    def rendezvous(self) -> str:
        """An address on this worker's node for the process group (called on rank 0)."""
        import ray

        with socket.socket() as probe:
            probe.bind(("", 0))
            port = probe.getsockname()[1]
        return f"tcp://{ray.util.get_node_ip_address()}:{port}"

    def setup(
        self,
        address: str,
        model_config: Any,
        weights: dict[str, torch.Tensor],
        optimizer_state: dict[str, Any] | None,
        reference_weights: dict[str, torch.Tensor] | None,
    ) -> None:
        """Join the process group (blocks until every rank joins) and build the model and optimizer."""
        import torch.distributed as dist

        device = _worker_device()
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(
            backend,
            init_method=address,
            rank=self.rank,
            world_size=self.world_size,
            timeout=timedelta(minutes=5),
        )
        self.module = _build_model(model_config, weights, device)
        self.model: torch.nn.Module = self.module
        if self.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel

            self.model = DistributedDataParallel(
                self.module, device_ids=[0] if device.type == "cuda" else None
            )
        self.optimizer = make_optimizer(self.module, self.cfg)
        if optimizer_state is not None:
            self.optimizer.load_state_dict(optimizer_state)
        self.reference = None
        if reference_weights is not None:
            self.reference = _build_model(model_config, reference_weights, device).requires_grad_(False)

    def update(self, batch: TrainBatch, step: int) -> dict[str, float]:
        return policy_update(
            self.model, self.optimizer, batch, self.settings, step, self.reference, self.rank, self.world_size
        )

    def state_dict(self) -> dict[str, torch.Tensor]:
        return _cpu_state(self.module)

    def optimizer_state(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


class EngineActor:
    """Hosts an hf rollout engine over its own copy of the policy."""

    def __init__(
        self,
        model_config: Any,
        weights: dict[str, torch.Tensor],
        tokenizer: Any,
        seed: int,
        num_threads: int = 1,
    ):
        from rlfactory_nb.engines.hf import HFEngine

        torch.set_num_threads(max(1, num_threads))
        model = _build_model(model_config, weights, _worker_device())
        self.engine = HFEngine(model, tokenizer, seed=seed, num_threads=max(1, num_threads))

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        return await self.engine.generate(prompt_ids, sampling)

    async def update_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        await self.engine.update_weights(state_dict)

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

    async def update_weights(self, state_dict: Any) -> None:
        """`state_dict`: tensors, or an ObjectRef to them (then engines read it from the object store)."""
        import ray

        reference = state_dict if isinstance(state_dict, ray.ObjectRef) else ray.put(state_dict)
        await asyncio.gather(*(actor.update_weights.remote(reference) for actor in self.actors))

    async def close(self) -> None:
        await asyncio.gather(*(actor.close.remote() for actor in self.actors), return_exceptions=True)


class RayBackend:
    """`num_workers` PolicyWorkers (one DDP group) and `num_engines` EngineActors on Ray."""

    def __init__(
        self,
        cfg: Any,
        policy: Any,
        optimizer_state: dict[str, Any] | None = None,
        reference: torch.nn.Module | None = None,
    ):
        if cfg.model.engine != "hf":
            raise NotImplementedError(
                f"model.engine={cfg.model.engine!r} with the Ray backend: Ray engine actors host the hf "
                "engine only so far; use cluster.backend=local for vLLM (see docs/gpu.md)"
            )
        ray = init_ray(cfg.cluster)
        cluster = cfg.cluster
        self.policy = policy
        threads = max(1, int(cluster.cpus_per_worker))
        resources = {"num_cpus": cluster.cpus_per_worker, "num_gpus": cluster.gpus_per_worker}
        weights = ray.put(_cpu_state(policy.model))
        reference_weights = ray.put(_cpu_state(reference)) if reference is not None else None
        worker_class = ray.remote(PolicyWorker).options(**resources)
        self.workers = [
            worker_class.remote(rank, cluster.num_workers, cfg, threads)
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
        engine_class = ray.remote(EngineActor).options(**resources)
        engines = [
            engine_class.remote(config, weights, policy.tokenizer, cfg.grpo.seed + index, threads)
            for index in range(cluster.num_engines)
        ]
        self.engine = RayEngine(engines, stop_token_ids_from_tokenizer(policy.tokenizer))
        self._ray = ray

    async def update(self, batch: TrainBatch, step: int) -> dict[str, float]:
        shared = self._ray.put(batch)  # one copy in the object store, read by every worker
        per_rank = await asyncio.gather(*(worker.update.remote(shared, step) for worker in self.workers))
        merged = {key: sum(m[key] for m in per_rank) / len(per_rank) for key in per_rank[0]}
        merged["train/tokens"] = sum(m["train/tokens"] for m in per_rank)  # each rank saw its own slice
        return merged

    async def sync_weights(self) -> None:
        await self.engine.update_weights(self.workers[0].state_dict.remote())

    async def worker_states(self) -> list[dict[str, torch.Tensor]]:
        """Every worker's weights (for checks that the ranks agree)."""
        return list(await asyncio.gather(*(worker.state_dict.remote() for worker in self.workers)))

    async def checkpoint_model(self) -> torch.nn.Module:
        self.policy.model.load_state_dict(await self.workers[0].state_dict.remote())
        return self.policy.model

    async def optimizer_state(self) -> dict[str, Any]:
        return await self.workers[0].optimizer_state.remote()

    async def close(self) -> None:
        await self.engine.close()
        await asyncio.gather(*(worker.close.remote() for worker in self.workers), return_exceptions=True)
        for actor in [*self.workers, *self.engine.actors]:
            self._ray.kill(actor)
