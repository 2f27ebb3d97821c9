"""Where a run's actors go on a Ray cluster of several nodes, and the record of where they went.

    policy workers   one placement group, PACK: as few nodes as they fit on, since a DDP or FSDP
                     group talks (NCCL) at every step, and inside a node that is NVLink, not the
                     network. Not STRICT_PACK: 16 workers on two 8-GPU nodes must still start.
    engine actors    one group, SPREAD: engines never talk to each other, and spread over the
                     nodes they share none of a node's network or host memory.
    colocated        (cluster.colocate on GPUs) worker i and engine i share bundle i of one group,
                     one whole GPU each: Ray alone would pack fractional GPUs first-fit, two
                     workers on one GPU, which NCCL refuses.

Every bundle carries its role's custom resources (cluster.worker_resources, engine_resources), so a
config pins a role to the nodes started with them (`ray start --resources='{"node3": 1}'`).

Ray keeps a group it cannot place pending forever, and its actors with it. `reserve` refuses at once
a bundle that no node could ever hold, and waits PLACEMENT_TIMEOUT_S for one the cluster has room
for but is using; either error names what was asked (bundles, strategy) and what each node has.

`locate` asks each started actor which node it runs on: the `Placement` record, which `RayBackend`
prints when it starts (the job's job.log), the driver keeps in job.json, and `cluster.view()` shows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from rlfactory_nb.config_cluster import ClusterConfig
from rlfactory_nb.errors import ConfigError, InsufficientResources

PLACEMENT_TIMEOUT_S = 120.0
"""how long `reserve` waits for a group the cluster has room for but is using (a group on an idle
cluster is placed in well under a second, on a busy 2-core test machine in a few)"""
RAY_OWN = ("CPU", "GPU", "memory", "object_store_memory")
"""resources every node has; the rest of a node's are custom ones (`ray start --resources`)"""

Bundle = dict[str, float]


@dataclass(frozen=True)
class GroupPlan:
    """One placement group to reserve: whose actors it holds, how Ray spreads it, and its bundles
    (bundle i holds worker or engine i; colocated, both)."""

    role: str
    strategy: Literal["PACK", "SPREAD"]
    bundles: list[Bundle]

    def __str__(self) -> str:
        return f"{self.role}: {self.strategy}, {len(self.bundles)} x {resources_text(self.bundles[0])}"


def plan_groups(cluster: ClusterConfig) -> list[GroupPlan]:
    """The placement groups of a run's workers and engines (see the module docstring).

    >>> [str(plan) for plan in plan_groups(ClusterConfig(num_gpus=4, engine_resources={"node3": 1}))]
    ['policy workers: PACK, 2 x 1 CPU, 1 GPU', 'engine actors: SPREAD, 2 x 1 CPU, 1 GPU, 1 node3']
    >>> [str(plan) for plan in plan_groups(ClusterConfig(num_gpus=2, colocate=True))]
    ['policy workers and engine actors: PACK, 2 x 2 CPU, 1 GPU']
    """
    cluster = cluster.layout()
    if colocated_on_gpus(cluster):
        if cluster.num_workers != cluster.num_engines or cluster.gpus_per_worker > 0.5:
            raise ConfigError(
                "cluster.colocate on GPUs pairs each policy worker with an engine on one GPU: set "
                f"cluster.num_workers ({cluster.num_workers}) equal to cluster.num_engines "
                f"({cluster.num_engines}) and cluster.gpus_per_worker <= 0.5 (or just cluster.num_gpus)"
            )
        custom = _sum(cluster.worker_resources, cluster.engine_resources)
        pair = {"CPU": 2 * cluster.cpus_per_worker, "GPU": 1.0, **custom}
        return [GroupPlan("policy workers and engine actors", "PACK", [pair] * cluster.num_workers)]
    return [
        GroupPlan(
            "policy workers", "PACK", [_bundle(cluster, cluster.worker_resources)] * cluster.num_workers
        ),
        GroupPlan(
            "engine actors", "SPREAD", [_bundle(cluster, cluster.engine_resources)] * cluster.num_engines
        ),
    ]


def colocated_on_gpus(cluster: ClusterConfig) -> bool:
    """Whether workers and engines share GPUs (on CPUs, colocation shares nothing to place)."""
    return cluster.colocate and cluster.gpus_per_worker > 0


def _bundle(cluster: ClusterConfig, custom: Mapping[str, float]) -> Bundle:
    gpus = {"GPU": cluster.gpus_per_worker} if cluster.gpus_per_worker > 0 else {}
    return {"CPU": cluster.cpus_per_worker, **gpus, **custom}


def _sum(*requests: Mapping[str, float]) -> Bundle:
    total: Bundle = {}
    for request in requests:
        for name, amount in request.items():
            total[name] = total.get(name, 0.0) + amount
    return total


# ------------------------------------------------------------------ what the cluster has


@dataclass(frozen=True)
class Node:
    """One alive Ray node: its id, address, and resources (total, and free when Ray says)."""

    node_id: str
    ip: str
    total: Bundle
    free: Bundle | None = None

    @property
    def name(self) -> str:
        """The address and the node's custom resources: "10.0.0.3 node3" (nodes of one machine, as in
        tests, share an address: then the custom resources tell them apart)."""
        return " ".join([self.ip, *custom_resources(self.total)])

    def __str__(self) -> str:
        free = self.free or {}
        names = [name for name in ("CPU", "GPU") if name in self.total] + list(custom_resources(self.total))
        amounts = ", ".join(
            f"{self.total[name]:g} {name}"
            + (f" ({free.get(name, 0.0):g} free)" if self.free is not None else "")
            for name in names
        )
        return f"{self.ip} ({self.node_id[:8]}): {amounts}"


def custom_resources(resources: Mapping[str, float]) -> dict[str, float]:
    """A node's resources without Ray's own ones and the ones Ray adds by itself (`node:<ip>`,
    `accelerator_type:...`, placement-group bundles: `CPU_group_<id>`)."""
    own = ("node:", "accelerator_type:", "bundle_group_")
    return {
        name: amount
        for name, amount in resources.items()
        if name not in RAY_OWN and not name.startswith(own) and "_group_" not in name
    }


def unplaceable(plans: list[GroupPlan], nodes: list[Node]) -> str | None:
    """Why `plans` can never be placed on `nodes` whatever else runs there, or None: a bundle no single
    node holds, or more of a resource than the nodes have in all.

    >>> node = Node("a" * 16, "10.0.0.2", {"CPU": 64, "GPU": 8, "node2": 1})
    >>> print(unplaceable(plan_groups(ClusterConfig(num_gpus=4, engine_resources={"node3": 1})), [node]))
    no node can hold a bundle of engine actors (1 CPU, 1 GPU, 1 node3)
    >>> print(unplaceable(plan_groups(ClusterConfig(num_gpus=16)), [node]))
    the groups ask for 16 GPU in all, the cluster has 8
    """
    for plan in plans:
        for bundle in plan.bundles:
            if not any(_fits(bundle, node.total) for node in nodes):
                return f"no node can hold a bundle of {plan.role} ({resources_text(bundle)})"
    asked = _sum(*(bundle for plan in plans for bundle in plan.bundles))
    has = _sum(*(node.total for node in nodes))
    for name, amount in asked.items():
        if amount > has.get(name, 0.0) + 1e-9:
            return f"the groups ask for {amount:g} {name} in all, the cluster has {has.get(name, 0.0):g}"
    return None


def _fits(bundle: Mapping[str, float], resources: Mapping[str, float]) -> bool:
    return all(amount <= resources.get(name, 0.0) + 1e-9 for name, amount in bundle.items())


def resources_text(resources: Mapping[str, float]) -> str:
    """'1 CPU, 1 GPU, 1 node3'."""
    return ", ".join(f"{amount:g} {name}" for name, amount in resources.items())


def placement_error(plans: list[GroupPlan], nodes: list[Node], reason: str) -> InsufficientResources:
    """The error for groups Ray did not place: what was asked, why, and what each node has."""
    asked = "; ".join(str(plan) for plan in plans)
    have = "; ".join(str(node) for node in nodes) or "no alive node"
    return InsufficientResources(
        f"cannot place the run's actors ({asked}): {reason}. The cluster's nodes: {have}. Ask for less "
        "(cluster.num_gpus, cluster.cpus_per_worker), fix the custom resources (cluster.worker_resources, "
        "cluster.engine_resources: each needs a node started with `ray start --resources`), or stop what "
        "holds them (cluster.jobs(), cluster.engines())"
    )


def cluster_nodes(ray: Any) -> list[Node]:
    """The alive nodes, with each one's free resources when Ray reports them."""
    free: dict[str, Bundle] = {}
    with contextlib.suppress(Exception):  # a private helper of Ray's: the error reads fine without it
        from ray._private.state import available_resources_per_node

        free = available_resources_per_node()
    return [
        Node(
            entry["NodeID"],
            entry.get("NodeManagerAddress", ""),
            dict(entry.get("Resources", {})),
            free.get(entry["NodeID"]),
        )
        for entry in ray.nodes()
        if entry.get("Alive")
    ]


# ------------------------------------------------------------------ reserving


class Reservation:
    """The placement groups of one run, and the Ray options that put actor i of a role in bundle i."""

    def __init__(self, cluster: ClusterConfig, plans: list[GroupPlan], groups: list[Any]):
        self.cluster, self.plans, self.groups = cluster, plans, groups

    def worker_options(self, rank: int) -> dict[str, Any]:
        return self._options(0, rank, self.cluster.worker_resources)

    def engine_options(self, index: int) -> dict[str, Any]:
        return self._options(len(self.groups) - 1, index, self.cluster.engine_resources)

    def _options(self, group: int, index: int, custom: Mapping[str, float]) -> dict[str, Any]:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        strategy = PlacementGroupSchedulingStrategy(self.groups[group], placement_group_bundle_index=index)
        return {
            "num_cpus": self.cluster.cpus_per_worker,
            "num_gpus": self.cluster.gpus_per_worker,
            "resources": dict(custom),
            "scheduling_strategy": strategy,
        }

    def remove(self) -> None:
        """Free the groups' resources (their actors should be gone first: removing kills them)."""
        from ray.util.placement_group import remove_placement_group

        for group in self.groups:
            with contextlib.suppress(Exception):  # already removed, or the cluster is gone
                remove_placement_group(group)
        self.groups = []


def reserve(ray: Any, cluster: ClusterConfig, timeout_s: float | None = None) -> Reservation:
    """Reserve the run's placement groups (`plan_groups`), or fail naming them and the nodes: at
    once when they can never be placed, after `timeout_s` (PLACEMENT_TIMEOUT_S) when the room they
    need stays taken."""
    from ray.util.placement_group import placement_group, remove_placement_group

    cluster = cluster.layout()
    plans = plan_groups(cluster)
    if reason := unplaceable(plans, cluster_nodes(ray)):
        raise placement_error(plans, cluster_nodes(ray), reason)
    groups = [placement_group(plan.bundles, strategy=plan.strategy) for plan in plans]
    timeout_s = PLACEMENT_TIMEOUT_S if timeout_s is None else timeout_s
    checks = [group.ready() for group in groups]
    _, waiting = ray.wait(checks, num_returns=len(checks), timeout=timeout_s)
    if waiting:
        nodes = cluster_nodes(ray)  # before removing: what the waiting groups could not get
        for group in groups:
            remove_placement_group(group)
        roles = ", ".join(plan.role for plan, check in zip(plans, checks, strict=True) if check in waiting)
        raise placement_error(
            plans, nodes, f"{roles} not placed within {timeout_s:g} s: the room they need is taken"
        )
    return Reservation(cluster, plans, groups)


# ------------------------------------------------------------------ where the actors went


@dataclass(frozen=True)
class ActorPlace:
    """One actor (or the trainer itself) and the node it runs on."""

    role: str
    """as `RayBackend.actors()` names it ("policy worker 0 of 2", "engine actor 1"), or "trainer"
    for the process that runs the training loop (a job's driver actor)"""
    node_ip: str
    node_id: str
    node_resources: dict[str, float] = field(default_factory=dict)
    """the node's custom resources (`ray start --resources`)"""

    @property
    def node(self) -> str:
        """The node's address and custom resources: "10.0.0.3 node3"."""
        return " ".join([self.node_ip, *self.node_resources])


@dataclass(frozen=True)
class Placement:
    """Where a run's actors landed: one row per actor, and the groups that put them there."""

    actors: list[ActorPlace]
    groups: list[str] = field(default_factory=list)
    """each placement group, as `GroupPlan` says it ("policy workers: PACK, 2 x 1 CPU, 1 GPU")"""

    def node_of(self, role: str) -> str | None:
        """The node the actor of `role` runs on ("10.0.0.3 node3"), None for a role not here."""
        return next((place.node for place in self.actors if place.role == role), None)

    def by_node(self) -> dict[str, list[str]]:
        """The roles on each node, by node id, in the order they were placed."""
        nodes: dict[str, list[str]] = {}
        for place in self.actors:
            nodes.setdefault(place.node_id, []).append(place.role)
        return nodes

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types, for job.json; `Placement.from_dict` reads it back."""
        return {"groups": list(self.groups), "actors": [asdict(place) for place in self.actors]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Placement | None:
        """A record from `to_dict`; None for one that is missing or not such a record (a job.json
        written before placements were recorded, or while the job starts)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("actors"), list):
            return None
        with contextlib.suppress(TypeError, KeyError, AttributeError):
            actors = [ActorPlace(**row) for row in data["actors"]]
            return cls(actors, [str(group) for group in data.get("groups") or []])
        return None

    def __str__(self) -> str:
        width = max((len(place.role) for place in self.actors), default=0)
        rows = [f"  {place.role:<{width}}  {place.node}  ({place.node_id[:8]})" for place in self.actors]
        nodes = len(self.by_node())
        return "\n".join(
            [f"placement: {len(self.actors)} on {nodes} node(s); {'; '.join(self.groups)}", *rows]
        )


def locate(ray: Any, actors: Mapping[str, Any], plans: list[GroupPlan]) -> Placement:
    """Ask each actor (role -> handle, as `RayBackend.actors()`) which node it runs on; the trainer
    (this process) comes first. Waits for the actors to finish starting."""
    node_ids = ray.get([handle.__ray_call__.remote(_node_id) for handle in actors.values()])
    nodes = {node.node_id: node for node in cluster_nodes(ray)}
    here = "?"
    with contextlib.suppress(Exception):  # a Ray Client kernel has no node of its own
        here = ray.get_runtime_context().get_node_id()
    rows = []
    for role, node_id in [("trainer", here), *zip(actors, node_ids, strict=True)]:
        node = nodes.get(node_id, Node(node_id, "?", {}))
        rows.append(ActorPlace(role, node.ip, node_id, custom_resources(node.total)))
    return Placement(rows, [str(plan) for plan in plans])


def _node_id(actor: Any) -> str:
    """Run inside an actor (`__ray_call__`): the id of its node."""
    import ray

    return ray.get_runtime_context().get_node_id()
