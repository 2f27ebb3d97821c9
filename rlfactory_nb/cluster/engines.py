"""Rollout engines on the cluster, driven from the kernel: `cluster.engine(model)` and `job.engine()`.

With a real model the kernel usually runs where there is no GPU (a login node, a laptop joined with
`ray://`), while the GPUs belong to the cluster. `ClusterEngine` is the engine contract
(engines/base.py) over one engine actor there, so `rf.Agent`, `RolloutStepper`, `RewardLab` and
`rf.evaluate` use it as they use a local engine:

    kernel: tokenizer, chat template, parser, ToolSet, rewards  --- token ids --->  engine actor
                                                                <--- Generation ---

Only token ids travel (tokens in, tokens out: DESIGN.md), never text; tool calls run where the
ToolSet runs, the kernel by default.

Lifetime: the actor is named `rlfactory-nb-engine:<label>-<id>` in the package's namespace, so a
leftover one shows in `cluster.view()` and `cluster.engines()`. It is owned by the kernel (not
detached): it goes when the handle is garbage-collected or closed (`async with cluster.engine(...)
as engine:` closes it at the end of the block), when the kernel disconnects, or when the cluster
shuts down.

Bad input fails before anything waits: an engine asking for CPUs or GPUs the cluster does not have
(or has, but all taken) is refused with both figures, since Ray would otherwise keep the actor
pending forever; an actor that dies mid-rollout fails the step with `EngineActorDied`, naming it.
"""

from __future__ import annotations

import contextlib
import time
import uuid
import weakref
from pathlib import Path
from typing import Any, Self

import torch

from rlfactory_nb.engines import Generation, SamplingParams, create_engine, engine_traits
from rlfactory_nb.engines.base import stop_token_ids_from_tokenizer
from rlfactory_nb.train.engine_actors import EngineActor, actor_device, build_model, cpu_state

ENGINE_PREFIX = "rlfactory-nb-engine:"
"""named engine actors are called ENGINE_PREFIX + label; not a prefix of JOB_PREFIX's names"""
FREE_WAIT_S = 10.0
"""how long `start_engine` waits for CPUs or GPUs the cluster has but are taken to become free"""
READY_TIMEOUT_S = 600.0
"""how long `start_engine` waits for an actor to load its model (a 4B vLLM engine: minutes)"""


class EngineActorDied(RuntimeError):
    """The engine actor behind a ClusterEngine died; `cluster.engine(...)` makes a new one."""


class InsufficientResources(RuntimeError):
    """The cluster has not the CPUs or GPUs an engine asks for (or none of them is free)."""


class ClusterEngineActor(EngineActor):
    """An EngineActor the kernel starts: from a folder or preset name resolved on the actor's own
    node, or from a model config and weights (a Policy of the kernel, a job's snapshot)."""

    def __init__(
        self, kind: str, source: str | dict[str, Any], weights: Any, seed: int, options: dict[str, Any], version: int | None
    ):
        self.version = version  # stamped on every Generation by EngineActor.generate
        options = dict(options)
        num_threads = max(1, int(options.pop("num_threads", 1)))
        torch.set_num_threads(num_threads)
        self.traits = engine_traits(kind)
        self.device = actor_device()
        if self.traits.loads == "objects":
            options.setdefault("num_threads", num_threads)
        if isinstance(source, dict) and self.traits.loads == "objects":
            model = build_model(source["config"], weights, self.device, getattr(torch, source["dtype"]))
            self.engine: Any = create_engine(kind, (model, source["tokenizer"]), seed=seed, **options)
        else:
            path = source["path"] if isinstance(source, dict) else source
            if self.traits.loads == "objects":
                options.setdefault("device", self.device)
            self.engine = create_engine(kind, str(_local_path(path)), seed=seed, **options)

    async def update_weights(self, state_dict: dict[str, torch.Tensor], version: int | None = None) -> None:
        await self.engine.update_weights(state_dict)
        self.version = version

    async def ready(self) -> str:
        """Answers once the engine is built; the actor's node address, for the record."""
        import ray

        return ray.util.get_node_ip_address()


class ClusterEngine:
    """The engine contract over one engine actor on the cluster; see the module docstring.

    `version`: the policy version its weights are (a job's step for `job.engine()`, None for a model
    loaded as is); every Generation it returns carries it."""

    def __init__(self, actor: Any, name: str, kind: str, tokenizer: Any, version: int | None = None):
        self.actor = actor
        self.name = name
        self.kind = kind
        self.tokenizer = tokenizer
        """the model's tokenizer and chat template, here in the kernel (token ids travel, text does not)"""
        self.version = version
        self._stop_token_ids = stop_token_ids_from_tokenizer(tokenizer)
        self._finalizer = weakref.finalize(self, _kill, actor)

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        return self._stop_token_ids

    @property
    def alive(self) -> bool:
        return self._finalizer.alive

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        """Sampled on the cluster; the Generation's `policy_version` is the actor's `version`."""
        return await self._call("generate", list(prompt_ids), sampling)

    async def update_weights(self, state_dict: Any, version: int | None = None) -> None:
        """New weights (tensors, or an ObjectRef to them); `version` labels later generations."""
        import ray

        weights = state_dict if isinstance(state_dict, ray.ObjectRef) else ray.put(dict(state_dict))
        await self._call("update_weights", weights, version)
        self.version = version

    async def sleep(self) -> None:
        await self._call("sleep")

    async def wake_up(self) -> None:
        await self._call("wake_up")

    async def close(self) -> None:
        """Stop the engine and kill its actor (also done when the kernel lets go of the handle)."""
        if self._finalizer.alive:
            with contextlib.suppress(Exception):
                await self.actor.close.remote()
            self._finalizer()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _call(self, method: str, *args: Any) -> Any:
        from ray.exceptions import RayActorError

        if not self._finalizer.alive:
            raise EngineActorDied(f"engine actor {self.name} was closed: start another with cluster.engine(...)")
        try:
            return await getattr(self.actor, method).remote(*args)
        except RayActorError as error:
            self._finalizer()
            raise EngineActorDied(
                f"{_reason(error, self.name, self.actor)} during {method}; its pending requests are lost. "
                "Start another with cluster.engine(...) (or job.engine())"
            ) from error

    def __repr__(self) -> str:
        version = "" if self.version is None else f", policy version {self.version}"
        state = "" if self.alive else ", closed"
        return f"ClusterEngine({self.name!r}, {self.kind}{version}{state})"


def start_engine(
    model: Any,
    kind: str = "hf",
    *,
    num_gpus: float = 0,
    num_cpus: float = 1,
    seed: int = 0,
    label: str | None = None,
    weights: Any = None,
    version: int | None = None,
    ready_timeout_s: float = READY_TIMEOUT_S,
    **options: Any,
) -> ClusterEngine:
    """An engine actor of `kind` on the connected cluster serving `model` (a Policy of this kernel,
    a Hugging Face folder the cluster can read, or a preset name), and its handle.

    `weights` (tensors or an ObjectRef): what the engine serves instead of the model's own (a job's
    snapshot), labelled `version`. `options` go to the engine (HFEngine, VLLMEngine)."""
    import ray

    engine_traits(kind)  # an unknown kind fails here, naming the kinds there are
    check_resources(num_cpus=num_cpus, num_gpus=num_gpus, what=f"cluster.engine(kind={kind!r})")
    source, tokenizer, weights = _source(model, kind, weights)
    name = f"{ENGINE_PREFIX}{label or _label(model)}-{uuid.uuid4().hex[:6]}"
    from rlfactory_nb.cluster.ray_cluster import NAMESPACE

    actor = (
        ray.remote(ClusterEngineActor)
        .options(name=name, namespace=NAMESPACE, num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0)
        .remote(kind, source, weights, seed, {"num_threads": max(1, int(num_cpus)), **options}, version)
    )
    engine = ClusterEngine(actor, name, kind, tokenizer, version)
    try:
        ray.get(actor.ready.remote(), timeout=ready_timeout_s)
        if weights is not None and engine_traits(kind).loads == "folder":
            ray.get(actor.update_weights.remote(weights, version), timeout=ready_timeout_s)
    except ray.exceptions.GetTimeoutError as error:
        engine._finalizer()
        raise TimeoutError(f"engine actor {name} did not load its model within {ready_timeout_s:g} s; killed") from error
    except ray.exceptions.RayError as error:
        engine._finalizer()
        raise RuntimeError(f"engine actor {name} failed to start: {_reason(error, name, actor)}") from error
    return engine


def check_resources(num_cpus: float, num_gpus: float, what: str, wait_s: float = FREE_WAIT_S) -> None:
    """Refuse a request the cluster cannot serve (Ray would leave the actor pending forever): at once
    when it has not that much at all, after `wait_s` when it has but it is taken (Ray reports an
    actor's resources free a moment after the actor is killed, e.g. an engine just closed)."""
    import ray

    total = ray.cluster_resources()
    wanted = {resource: amount for resource, amount in (("CPU", num_cpus), ("GPU", num_gpus)) if amount}
    for resource, amount in wanted.items():
        if amount > total.get(resource, 0.0):
            raise InsufficientResources(
                f"{what} asks for {amount:g} {resource}(s) but the cluster has {total.get(resource, 0.0):g} "
                f"({_summary(total)}): ask for fewer, or connect to a cluster that has them"
            )
    deadline = time.monotonic() + wait_s
    while short := [r for r, amount in wanted.items() if amount > ray.available_resources().get(r, 0.0)]:
        if time.monotonic() > deadline:
            resource, free = short[0], ray.available_resources().get(short[0], 0.0)
            raise InsufficientResources(
                f"{what} asks for {wanted[resource]:g} {resource}(s); the cluster has {total[resource]:g} but only "
                f"{free:g} free (training jobs: cluster.jobs(); engines: cluster.engines()): stop one, or ask for fewer"
            )
        time.sleep(0.2)


def engine_names() -> list[str]:
    """Engine actors alive on the cluster (this kernel's and leftovers of others)."""
    from ray.util import list_named_actors

    from rlfactory_nb.cluster.ray_cluster import NAMESPACE

    return sorted(
        entry["name"]
        for entry in list_named_actors(all_namespaces=True)
        if entry.get("namespace") == NAMESPACE and entry["name"].startswith(ENGINE_PREFIX)
    )


def _source(model: Any, kind: str, weights: Any) -> tuple[str | dict[str, Any], Any, Any]:
    """(what the actor builds from, the kernel's tokenizer, the weights to send). `model` may also
    be such a source already (a job's snapshot: config, tokenizer, dtype, path)."""
    if isinstance(model, dict):
        return model, model["tokenizer"], weights
    from transformers import AutoTokenizer

    if isinstance(model, (str, Path)):
        from rlfactory_nb.models import lora
        from rlfactory_nb.models.files import model_folder

        name = str(model)
        path = Path(model_folder(name, log=lambda _: None))
        if not lora.is_adapter_folder(path):
            return name, AutoTokenizer.from_pretrained(str(path), trust_remote_code=False), weights
        from rlfactory_nb.models.policy import Policy

        model = Policy.load(path, device="cpu", log=lambda _: None)  # an adapter: merged here, sent as weights
    policy = model
    dtype = str(next(policy.model.parameters()).dtype).removeprefix("torch.")
    source = {"config": policy.model.config, "tokenizer": policy.tokenizer, "dtype": dtype, "path": str(policy.base_path or policy.path)}
    if weights is None and (engine_traits(kind).loads == "objects" or policy.base_path is not None):
        weights = cpu_state(policy.model)  # a LoRA policy's merged weights go to a vLLM engine by sync
    return source, policy.tokenizer, weights


def _local_path(name: str) -> Path | str:
    """A preset name resolved on this node (built there on first use); a folder (its checkpoint
    digests checked, as `Policy.load` does) or a hub id as is."""
    from rlfactory_nb.models.checkpoint import verify_digests
    from rlfactory_nb.models.files import model_folder

    folder = model_folder(name, log=lambda _: None)
    if isinstance(folder, Path):
        verify_digests(folder)
    return folder


def _label(model: Any) -> str:
    text = str(getattr(model, "name", "") or getattr(model, "path", "") or model)
    return Path(text.rstrip("/")).name or "model"


def _summary(resources: dict[str, float]) -> str:
    return ", ".join(f"{resources.get(key, 0.0):g} {key}s" for key in ("CPU", "GPU"))


def _reason(error: BaseException, name: str, actor: Any) -> str:
    from rlfactory_nb.cluster.failures import describe_failure

    return describe_failure(error, {f"engine actor {name}": actor})


def _kill(actor: Any) -> None:
    """Kill an engine actor if its cluster is still connected (a finalizer: never raises)."""
    with contextlib.suppress(Exception):
        import ray

        if ray.is_initialized():
            ray.kill(actor, no_restart=True)
