"""Rollout engines on the cluster, driven from the kernel: `cluster.engine(model)` and `job.engine()`.

With a real model the kernel usually runs where there is no GPU (a login node, a laptop joined with
`ray://`), while the GPUs belong to the cluster. `ClusterEngine` is the engine contract
(engines/base.py) over one engine actor there (or a run's several: `RayBackend`), so `rf.Agent`, `RolloutStepper`, `RewardLab` and
`rf.evaluate` use it as they use a local engine:

    kernel: tokenizer, chat template, parser, ToolSet, rewards  --- token ids --->  engine actor
                                                                <--- Generation ---

Only token ids travel (tokens in, tokens out: rollout/tokens.py), never text; tool calls run where the
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

import asyncio
import contextlib
import itertools
import time
import uuid
import weakref
from pathlib import Path
from typing import Any, Self

from rlfactory_nb.cluster.engine_actor import EngineActor, EngineStart
from rlfactory_nb.cluster.names import NAMESPACE
from rlfactory_nb.engines.base import Generation, SamplingParams, engine_traits, stop_token_ids_from_tokenizer
from rlfactory_nb.engines.build import Snapshot
from rlfactory_nb.engines.versioned import next_version
from rlfactory_nb.errors import EngineActorDied, EngineStateError, EngineTimeout, InsufficientResources
from rlfactory_nb.models.policy import Policy, ResolvedSource, engine_source
from rlfactory_nb.train.failures import describe_failure

ENGINE_PREFIX = "rlfactory-nb-engine:"
"""named engine actors are called ENGINE_PREFIX + label; not a prefix of JOB_PREFIX's names"""
FREE_WAIT_S = 10.0
"""how long `start_engine` waits for CPUs or GPUs the cluster has but are taken to become free"""
READY_TIMEOUT_S = 600.0
"""how long `start_engine` waits for an actor to load its model (a 4B vLLM engine: minutes)"""


class ClusterEngine:
    """The engine contract over engine actors on the cluster (one for `cluster.engine(...)`, a run's
    `cluster.num_engines` for its trainer): requests go round-robin, weight updates, sleep and wake to
    every actor. See the module docstring.

    `version`: the policy version its weights are (a job's step for `job.engine()`, None for a model
    loaded as is); every Generation it returns carries the version its actor held, by the one rule
    (`rlfactory_nb.engines.versioned`), which this handle follows too."""

    def __init__(
        self, actors: list[Any], name: str, kind: str, tokenizer: Any, version: int | None = None, owned: bool = True
    ):
        self.actors = actors
        self.owned = owned
        """False for a handle attached to someone else's running actor (`attach_engine`): closing the
        handle, or dropping it, leaves the actor running"""
        self.name = name
        self.kind = kind
        self.tokenizer = tokenizer
        """the model's tokenizer and chat template, here in the kernel (token ids travel, text does not)"""
        self.version = version
        self.max_positions: int | None = None
        """the context length its actors' engine takes (set by `start_engine`; None: unknown)"""
        self._stop_token_ids = stop_token_ids_from_tokenizer(tokenizer)
        self._next = itertools.cycle(actors)
        self._death: BaseException | None = None
        self._finalizer = weakref.finalize(self, _kill, list(actors) if owned else [])

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        return self._stop_token_ids

    @property
    def alive(self) -> bool:
        return self._finalizer.alive

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        """Sampled on the cluster; the Generation's `policy_version` is its actor's version."""
        return await self._call(next(self._next), "generate", list(prompt_ids), sampling)

    async def score(self, token_ids: list[int]) -> list[float]:
        """Log-probs of given ids, computed on the cluster (engines/base.py); only ids and floats travel."""
        return await self._call(next(self._next), "score", list(token_ids))

    async def update_weights(self, state_dict: Any, version: int | None = None) -> None:
        """New weights (tensors, or an ObjectRef to them: then the actors read them from the object
        store, never through this process); `version` labels later generations (None: the next)."""
        import ray  # here: ray takes seconds to import, and only a connected kernel gets this far

        weights = state_dict if isinstance(state_dict, ray.ObjectRef) else ray.put(dict(state_dict))
        await self._all("update_weights", weights, version)
        self.version = next_version(self.version, version)

    async def sleep(self) -> None:
        await self._all("sleep")

    async def wake_up(self) -> None:
        await self._all("wake_up")

    async def close(self) -> None:
        """Stop the engines and kill their actors (also done when the kernel lets go of the handle)."""
        if self._finalizer.alive:
            if self.owned:
                await asyncio.gather(*(actor.close.remote() for actor in self.actors), return_exceptions=True)
            self._finalizer()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _all(self, method: str, *args: Any) -> None:
        await asyncio.gather(*(self._call(actor, method, *args) for actor in self.actors))

    async def _call(self, actor: Any, method: str, *args: Any) -> Any:
        from ray.exceptions import RayActorError  # here: see update_weights

        if not self._finalizer.alive:
            raise EngineActorDied(
                f"engine actor {self.name} was closed: start another with cluster.engine(...)"
            ) from self._death
        try:
            return await getattr(actor, method).remote(*args)
        except RayActorError as error:
            self._death = error
            self._finalizer()
            raise EngineActorDied(
                f"{describe_failure(error, self._roles())} during {method}; its pending requests are lost. "
                "Start another with cluster.engine(...) (or job.engine())"
            ) from error

    def _roles(self) -> dict[str, Any]:
        """The actors by the name an error gives them."""
        if len(self.actors) == 1:
            return {f"engine actor {self.name}": self.actors[0]}
        return {f"engine actor {index} of {self.name}": actor for index, actor in enumerate(self.actors)}

    def __repr__(self) -> str:
        version = "" if self.version is None else f", policy version {self.version}"
        state = "" if self.alive else ", closed"
        return f"ClusterEngine({self.name!r}, {self.kind}{version}{state})"


def start_engine(
    model: Policy | str | Path | Snapshot,
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
    a Hugging Face folder the cluster can read, a preset name, or a job's Snapshot), and its handle.

    `weights` (tensors or an ObjectRef): what the engine serves instead of the model's own (a job's
    snapshot), labelled `version`. `options` go to the engine (HFEngine, VLLMEngine)."""
    import ray  # here: ray takes seconds to import, and only a connected kernel gets this far

    engine_traits(kind)  # an unknown kind fails here, naming the kinds there are
    check_resources(num_cpus=num_cpus, num_gpus=num_gpus, what=f"cluster.engine(kind={kind!r})")
    resolved = _resolve(model, kind)
    weights = weights if weights is not None else resolved.weights
    threads = max(1, int(options.pop("num_threads", max(1, int(num_cpus)))))
    start = EngineStart(kind, resolved.source, seed, version, threads, options)
    name = f"{ENGINE_PREFIX}{label or _label(model)}-{uuid.uuid4().hex[:6]}"
    actor = (
        ray.remote(EngineActor)
        .options(name=name, namespace=NAMESPACE, num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0)
        .remote(start, weights)
    )
    engine = ClusterEngine([actor], name, kind, resolved.tokenizer, version)
    try:
        ray.get(actor.ready.remote(), timeout=ready_timeout_s)
        engine.max_positions = ray.get(actor.max_positions.remote(), timeout=ready_timeout_s)
        if weights is not None and engine_traits(kind).loads == "folder":
            ray.get(actor.update_weights.remote(weights, version), timeout=ready_timeout_s)
    except ray.exceptions.GetTimeoutError as error:
        engine._finalizer()
        raise EngineTimeout(f"engine actor {name} did not load its model within {ready_timeout_s:g} s; killed") from error
    except ray.exceptions.RayError as error:
        engine._finalizer()
        raise EngineStateError(f"engine actor {name} failed to start: {describe_failure(error, engine._roles())}") from error
    return engine


def attach_engine(name: str) -> ClusterEngine:
    """A handle on an engine actor already running on the connected cluster (`cluster.engine(...)`),
    by its name as `cluster.engines()` lists it (the ENGINE_PREFIX may be left out). The handle
    never stops the actor: its owner does (e.g. the kernel that started it)."""
    import ray  # here: see start_engine

    full = name if name.startswith(ENGINE_PREFIX) else ENGINE_PREFIX + name
    try:
        actor = ray.get_actor(full, namespace=NAMESPACE)
    except ValueError as error:
        raise EngineStateError(f"no engine actor named {full!r} is running; running: {engine_names()}") from error
    kind, tokenizer, max_positions = ray.get(actor.described.remote(), timeout=READY_TIMEOUT_S)
    engine = ClusterEngine([actor], full, kind, tokenizer, owned=False)
    engine.max_positions = max_positions
    return engine


def _resolve(model: Policy | str | Path | Snapshot, kind: str) -> ResolvedSource:
    """A job's Snapshot as it is (its weights come as their own argument); anything else as
    `rlfactory_nb.models.policy.engine_source` ships it to an actor."""
    if isinstance(model, Snapshot):
        return ResolvedSource(model, model.tokenizer)
    return engine_source(model, kind, shipped=True)


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

    return sorted(
        entry["name"]
        for entry in list_named_actors(all_namespaces=True)
        if entry.get("namespace") == NAMESPACE and entry["name"].startswith(ENGINE_PREFIX)
    )


def _label(model: Any) -> str:
    text = str(getattr(model, "name", "") or getattr(model, "path", "") or model)
    return Path(text.rstrip("/")).name or "model"


def _summary(resources: dict[str, float]) -> str:
    return ", ".join(f"{resources.get(key, 0.0):g} {key}s" for key in ("CPU", "GPU"))


def _kill(actors: list[Any]) -> None:
    """Kill engine actors if their cluster is still connected (a finalizer: never raises)."""
    with contextlib.suppress(Exception):
        import ray  # here: see ClusterEngine.update_weights

        if ray.is_initialized():
            for actor in actors:
                ray.kill(actor, no_restart=True)
